package bench

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/packages/packagestest"
	"github.com/codeexec/codeexec/sandbox/process"
)

// BenchmarkPackages runs a program that imports a package it names, per
// mode and language: cold, each iteration with an empty cache (the install
// phase, then the run), and cached, the same list again (the run alone).
// The index is served by the benchmark on this machine. Docker mode runs
// without a warm pool here (a container per run, as in BenchmarkPython), so
// its cached time is a container's start; with the server's warm pool a
// cached run takes a warm container (see docs/performance.md).
//
//	go test ./sandbox/bench -run '^$' -bench Packages -benchtime 10x
func BenchmarkPackages(b *testing.B) {
	ctx := context.Background()
	langs := []string{"python", "javascript"}
	ip := "127.0.0.1"
	if ifi, err := net.InterfaceByName("docker0"); err == nil {
		// The Docker bridge's own address: the install containers' proxy
		// reaches it as process mode's reaches loopback.
		if addrs, _ := ifi.Addrs(); len(addrs) > 0 {
			if n, ok := addrs[0].(*net.IPNet); ok && n.IP.To4() != nil {
				ip = n.IP.String()
			}
		}
	}
	ix := packagestest.Serve(b, net.JoinHostPort(ip, "0"), packagestest.Python, packagestest.JavaScript)
	policy, err := packages.IndexPolicy([]string{ix.PipURL, ix.NpmURL}, nil, packages.DefaultCaps)
	if err != nil {
		b.Fatal(err)
	}
	root, err := os.MkdirTemp("", "codeexec-bench-packages-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(root)
	_ = os.Chmod(root, 0o711)
	programs := map[string]struct{ code, spec string }{
		"python":     {"import codeexec_demo\nprint(codeexec_demo.VALUE)\n", "codeexec-demo==1.0"},
		"javascript": {"console.log(require('codeexec-demo').value)\n", "codeexec-demo@1.0.0"},
	}
	for _, m := range []struct {
		name string
		make func(egress *proxy.Proxy, cache string) (sandbox.Runner, error)
	}{
		{"process", func(e *proxy.Proxy, _ string) (sandbox.Runner, error) {
			return process.New(ctx, process.Config{Languages: langs, Egress: e})
		}},
		{"docker", func(e *proxy.Proxy, cache string) (sandbox.Runner, error) {
			return docker.New(ctx, docker.Config{Image: dockerImage(), Languages: langs, Egress: e, PackagesCache: cache})
		}},
	} {
		b.Run(m.name, func(b *testing.B) {
			cacheDir := filepath.Join(root, m.name)
			if err := os.Mkdir(cacheDir, 0o711); err != nil {
				b.Fatal(err)
			}
			install, err := m.make(proxy.New(policy, nil), "")
			if err != nil {
				if m.name == "docker" && os.Getenv("CODE_EXEC_REQUIRE_DOCKER") != "1" {
					b.Skipf("docker mode unavailable: %v", err)
				}
				b.Fatal(err)
			}
			defer install.Close()
			run, err := m.make(nil, cacheDir)
			if err != nil {
				b.Fatal(err)
			}
			defer run.Close()
			setup := packagestest.Setup{Run: run, Install: install, Index: ix, CacheDir: cacheDir}
			// layer is the packages layer over an empty cache.
			layer := func(b *testing.B) *packages.Runner {
				entries, _ := os.ReadDir(cacheDir)
				for _, e := range entries {
					_ = os.RemoveAll(filepath.Join(cacheDir, e.Name()))
				}
				return setup.Layer(b)
			}
			for _, lang := range langs {
				p := programs[lang]
				req := sandbox.Request{Language: lang, Code: p.code, Packages: []string{p.spec}, Limits: packagestest.RunLimits}
				check := func(b *testing.B, r sandbox.Runner) {
					res, err := r.Run(ctx, req)
					if err != nil || strings.TrimSpace(res.Stdout) != "42" {
						b.Fatalf("%+v %v", res, err)
					}
				}
				b.Run(lang+"/cold", func(b *testing.B) {
					for b.Loop() {
						check(b, layer(b))
					}
				})
				b.Run(lang+"/cached", func(b *testing.B) {
					l := layer(b)
					check(b, l)
					for b.Loop() {
						check(b, l)
					}
				})
			}
		})
	}
}
