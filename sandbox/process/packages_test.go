package process_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/packages/packagestest"
	"github.com/codeexec/codeexec/sandbox/process"
)

// TestPackages runs the shared packages suite in process mode against an
// index on the host's loopback: the install phase reaches it through its
// own egress proxy, and a run's 127.0.0.1 is its own loopback.
func TestPackages(t *testing.T) {
	requireActive(t, newRunnerWith(t), "network namespace")
	packagestest.RequireInstallers(t)
	ix := packagestest.Serve(t, "127.0.0.1:0", packagestest.Python, packagestest.JavaScript)
	policy, err := packages.IndexPolicy([]string{ix.PipURL, ix.NpmURL}, nil, packages.DefaultCaps)
	if err != nil {
		t.Fatal(err)
	}
	langs := []string{"python", "javascript"}
	root := WorkRoot(t)
	install, err := process.New(context.Background(), process.Config{Languages: langs, WorkRoot: root, Egress: proxy.New(policy, nil)})
	if err != nil {
		t.Fatalf("process.New (install): %v", err)
	}
	t.Cleanup(func() { _ = install.Close() })
	run, err := process.New(context.Background(), process.Config{Languages: langs, WorkRoot: root})
	if err != nil {
		t.Fatalf("process.New: %v", err)
	}
	t.Cleanup(func() { _ = run.Close() })
	setup := packagestest.Setup{Run: run, Install: install, Index: ix, CacheDir: filepath.Join(root, "packages"), IndexHost: "127.0.0.1"}
	packagestest.Check(t, setup)
	t.Run("sessions", func(t *testing.T) {
		setup.CacheDir = filepath.Join(root, "packages-sessions")
		packagestest.CheckSessions(t, setup, run.Sessions())
	})
	t.Run("nothing runs before the program", func(t *testing.T) {
		setup.CacheDir = filepath.Join(root, "packages-hooks")
		packagestest.CheckNothingRunsFirst(t, setup, run.Sessions())
	})
}
