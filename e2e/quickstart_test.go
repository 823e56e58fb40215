package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// quickStart returns the commands of the README's quick start, in order,
// without their comments.
func quickStart(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## Quick start\n")
	if !ok {
		t.Fatal("README.md has no '## Quick start' section")
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(after)
	if block == nil {
		t.Fatal("the quick start has no ```sh block")
	}
	var cmds []string
	for _, line := range strings.Split(block[1], "\n") {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); line != "" {
			cmds = append(cmds, line)
		}
	}
	if len(cmds) != 2 {
		t.Fatalf("the quick start has %d commands, want 2 (start the server, run the tests): %q", len(cmds), cmds)
	}
	return cmds
}

// The README's two quick-start commands work as written for whoever runs the
// tests (CI runs them as root and as an ordinary user): the first starts a
// server that runs the documented example in its default mode, and the
// second is the test command that .ci/run runs.
func TestQuickStart(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmds := quickStart(t, root)

	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(cmds[1]) + `$`).Match(ci) {
		t.Errorf(".ci/run does not run the README's test command %q on a line of its own", cmds[1])
	}

	cmd := exec.Command("sh", "-c", "exec "+cmds[0])
	cmd.Dir = root
	// The user's own environment, as on their terminal, with no codeexec
	// setting: the default mode.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CODE_EXEC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, err := newClient().Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connecting to %q: %v; stderr:\n%s", cmds[0], err, stderr.String())
	}
	defer cs.Close()
	// `go run` leaves the server as its child: make sure both end.
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	checkExample(t, cs, "process")
	if t.Failed() {
		t.Logf("stderr of %q:\n%s", cmds[0], stderr.String())
	}
}
