package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// TestWorkspaceCheckReadsTheProbe: what workspaceProbe prints decides: a
// folder the code's user cannot read and search (or, read-write, write)
// is refused with the fix; entries below it that it cannot read are a
// warning. (No engine: TestWorkspaceRunsCannotUse runs the probe.)
func TestWorkspaceCheckReadsTheProbe(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		writable bool
		lines    []string
		err      string
		warning  string
	}{
		{"readable", false, []string{"@@workspace-read"}, "", ""},
		{"private", false, nil, "do not let it read and search the folder; run chmod o+rx /srv/project there (or setfacl -m u:10001:rx /srv/project", ""},
		{"rw, read-only folder", true, []string{"@@workspace-read"}, "write (CODE_EXEC_WORKSPACE_MODE=rw) the folder; run chmod o+rwx /srv/project", ""},
		{"rw", true, []string{"@@workspace-read", "@@workspace-write"}, "", ""},
		{"private entries", false, []string{"@@workspace-read", "@@workspace-unreadable a", "@@workspace-unreadable b/c", "@@workspace-unreadable d", "@@workspace-unreadable e"},
			"", "the runs cannot read entries of the workspace /srv/project (a, b/c, d, …): code runs as uid 10001 in the containers; run chmod -R o+rX /srv/project"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := &Runner{cfg: Config{Workspace: &sandbox.Workspace{Dir: "/srv/project", Writable: c.writable}}, uid: "10001"}
			warning, err := r.checkWorkspace(c.lines)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("err = %v, want %q", err, c.err)
			}
			if !strings.HasPrefix(warning, c.warning) || (c.warning == "") != (warning == "") {
				t.Errorf("warning = %q, want %q", warning, c.warning)
			}
		})
	}
}

// TestWorkspaceRunsCannotUse: with the real engine and image, a workspace
// that the code's user cannot read stops New with the fix, and a file
// below a readable one that it cannot read is a warning in Capabilities.
func TestWorkspaceRunsCannotUse(t *testing.T) {
	engine(t)
	mk := func(t *testing.T, mode os.FileMode) string {
		t.Helper()
		parent := t.TempDir()
		dir := filepath.Join(parent, "project")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "secret.key"), []byte("key\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	private := mk(t, 0o700)
	_, err := New(ctx, Config{Image: testImage(), Runtime: testRuntime(), Languages: []string{"python"}, Workspace: &sandbox.Workspace{Dir: private}})
	if err == nil || !strings.Contains(err.Error(), "run chmod o+rx "+private) {
		t.Errorf("New with a private workspace: %v, want an error that says chmod o+rx %s", err, private)
	}
	open := mk(t, 0o755)
	r, _ := newRunner(t, Config{Languages: []string{"python"}, Workspace: &sandbox.Workspace{Dir: open}})
	found := false
	for _, w := range r.Capabilities().Warnings {
		found = found || strings.Contains(w, "secret.key") && strings.Contains(w, "chmod -R o+rX "+open)
	}
	if !found {
		t.Errorf("the warnings %q do not name secret.key with the fix", r.Capabilities().Warnings)
	}
}
