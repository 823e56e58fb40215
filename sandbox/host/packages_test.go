package host_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/packages/packagestest"
)

// TestPackagesRunNothingFirst: in mode none too, a run or a session with
// packages starts python without them on its path, so no file of a package
// (sitecustomize, a .pth file, a module named like a standard one) and no
// file of the run runs before the program, which still imports the package.
func TestPackagesRunNothingFirst(t *testing.T) {
	packagestest.RequireInstallers(t)
	ix := packagestest.Serve(t, "127.0.0.1:0", packagestest.Python, nil)
	policy, err := packages.IndexPolicy([]string{ix.PipURL}, nil, packages.DefaultCaps)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	langs := []string{"python"}
	install, err := host.New(context.Background(), host.Config{Languages: langs, WorkRoot: root, Egress: proxy.New(policy, nil)})
	if err != nil {
		t.Fatalf("host.New (install): %v", err)
	}
	t.Cleanup(func() { _ = install.Close() })
	run, err := host.New(context.Background(), host.Config{Languages: langs, WorkRoot: root})
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	t.Cleanup(func() { _ = run.Close() })
	cache := filepath.Join(root, "packages")
	if err := os.Mkdir(cache, 0o711); err != nil {
		t.Fatal(err)
	}
	packagestest.CheckNothingRunsFirst(t, packagestest.Setup{Run: run, Install: install, Index: ix, CacheDir: cache, IndexHost: "127.0.0.1"}, run.Sessions())
}
