package executor_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Every run starts the codeexec binary twice (supervisor and exec stage),
// and each start runs the initialisation of every package that
// sandbox/process/early (which runs them) depends on, plus every package
// that Go's init order puts before it. An
// HTTP stack, the MCP SDK, the Docker client, JSON Schema or the approval
// rules among those dependencies cost each run milliseconds (measured: the
// helpers started 5 ms later, 3.5 ms instead of 8.5, when net/http was one).
// The helpers must stay light.
func TestHelpersStayLight(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	// sandbox/process/early runs them, and imports nothing but this run
	// core; the run helper (cmd/codeexec-sandbox) is early alone.
	out, err := exec.Command("go", "list", "-deps", "github.com/codeexec/codeexec/sandbox/process/early", "github.com/codeexec/codeexec/cmd/codeexec-sandbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	heavy := []string{
		"net/http",
		"github.com/mark3labs/mcp-go",
		"github.com/modelcontextprotocol/go-sdk",
		"github.com/docker/docker",
		"github.com/moby/moby",
		"github.com/santhosh-tekuri/jsonschema",
		"github.com/codeexec/codeexec/approvals",
		"github.com/codeexec/codeexec/server",
		"github.com/prometheus",
		// Its init builds tables of every architecture's system calls;
		// the server assembles the seccomp filter (seccompfilter).
		"github.com/elastic/go-seccomp-bpf",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, h := range heavy {
			if dep == h || strings.HasPrefix(dep, h+"/") {
				t.Errorf("the run helpers depend on %s", dep)
			}
		}
	}
}
