package docker

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/packages/packagestest"
)

// TestPackages runs the shared packages suite in docker mode. The index
// listens on the Docker bridge's own address when there is one (which a
// container on a bridge network could reach directly, and a run container
// must not), else on loopback; the install container reaches it only
// through its egress proxy.
func TestPackages(t *testing.T) {
	engine(t)
	ip := bridgeIP()
	if ip == "" {
		ip = "127.0.0.1"
	}
	ix := packagestest.Serve(t, net.JoinHostPort(ip, "0"), packagestest.Python, packagestest.JavaScript)
	policy, err := packages.IndexPolicy([]string{ix.PipURL, ix.NpmURL}, nil, packages.DefaultCaps)
	if err != nil {
		t.Fatal(err)
	}
	langs := []string{"python", "javascript"}
	cacheDir := filepath.Join(t.TempDir(), "packages")
	if err := os.Mkdir(cacheDir, 0o711); err != nil {
		t.Fatal(err)
	}
	install, _ := newRunner(t, Config{Languages: langs, Egress: proxy.New(policy, nil)})
	// Warm containers see the cache: a cached run takes one. Two per
	// language, as the server keeps by default (CODE_EXEC_DOCKER_POOL_SIZE).
	run, _ := newRunner(t, Config{Languages: langs, PoolSize: 2, PoolLimits: packagestest.RunLimits, PackagesCache: cacheDir})
	setup := packagestest.Setup{Run: run, Install: install, Index: ix, CacheDir: cacheDir, IndexHost: ip,
		Settle: func(t *testing.T, lang string) { waitWarm(t, run, lang, 1) }}
	packagestest.Check(t, setup)
	if _, warm := servedOf(run).List(); !slices.Contains(warm, true) {
		t.Errorf("no run with packages took a warm container: %v", warm)
	}
	// An entry of the cache that every container sees (the program header
	// names it), and in a session the folder bound for its container.
	t.Run("nothing runs before the program", func(t *testing.T) {
		packagestest.CheckNothingRunsFirst(t, setup, run.Sessions())
	})
}

// TestPackagesInSession: a docker session created with packages imports
// them in every call.
func TestPackagesInSession(t *testing.T) {
	engine(t)
	ix := packagestest.Serve(t, "127.0.0.1:0", packagestest.Python, nil)
	policy, err := packages.IndexPolicy([]string{ix.PipURL}, nil, packages.DefaultCaps)
	if err != nil {
		t.Fatal(err)
	}
	install, _ := newRunner(t, Config{Languages: []string{"python"}, Egress: proxy.New(policy, nil)})
	run, _ := newRunner(t, Config{Languages: []string{"python"}})
	setup := packagestest.Setup{Run: run, Install: install, Index: ix, CacheDir: t.TempDir() + "/packages", IndexHost: "127.0.0.1"}
	packagestest.CheckSessions(t, setup, run.Sessions())
}
