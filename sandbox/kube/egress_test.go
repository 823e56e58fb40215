package kube

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestEgressAllowlist runs the shared egress check in kubernetes mode: the
// run's pod reaches the allowed listeners only through its relay and the
// proxy, is refused the rest, and its result reports both; a warm pod's
// relay and session, started before its run, report that run's alone.
func TestEgressAllowlist(t *testing.T) {
	ip := sandboxtest.HostListenerIP()
	e := sandboxtest.StartEgress(t, ip)
	for _, tc := range []struct {
		name         string
		allowPrivate bool
		pool         int
	}{
		{"private allowed, warm pool", true, 1},
		{"private refused", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Languages: []string{"python", "bash"}, Egress: proxy.New(e.Policy(t, tc.allowPrivate), nil)}
			if tc.pool > 0 {
				cfg = poolConfig(tc.pool, "python", "bash")
				cfg.Egress = proxy.New(e.Policy(t, tc.allowPrivate), nil)
			}
			r := newRunner(t, cfg)
			caps := r.Capabilities()
			if !caps.Active("network") || !caps.Isolation.Network {
				t.Fatalf("the network protection is not active: %+v", caps.Isolation)
			}
			if caps.Egress == nil || !caps.Egress.Enforced || caps.Egress.Proxy != relayAddr {
				t.Fatalf("sandbox_info's network policy: %+v", caps.Egress)
			}
			for _, p := range caps.Protections {
				if p.Name == "network" && !strings.Contains(p.Detail, "egress proxy") {
					t.Errorf("the network protection does not say how runs reach the proxy: %s", p.Detail)
				}
			}
			runner := kubetest.Scaled{Runner: r}
			if tc.pool > 0 {
				waitWarm(t, r, "python", 1)
			}
			e.CheckEgress(t, runner, tc.allowPrivate, sandboxtest.RawTargets(ip)...)
			if tc.pool > 0 {
				// The pool made another warm pod; its relay and session
				// were open before its run, whose report is its own.
				waitWarm(t, r, "python", 1)
				e.CheckEgress(t, runner, tc.allowPrivate, sandboxtest.RawTargets(ip)...)
				if _, warm := servedOf(r).List(); !slices.Contains(warm, true) {
					t.Fatalf("no run took a warm pod: %v", warm)
				}
			}
		})
	}
}

// TestEgressRelayCannotBeTurned: the program cannot write to the relay's
// stream (its descriptors are out of reach), and killing the relay leaves
// it without network, never with more; the run still ends with its
// result, the report has what it reached before, and the next run has its
// network again.
func TestEgressRelayCannotBeTurned(t *testing.T) {
	ip := sandboxtest.HostListenerIP()
	e := sandboxtest.StartEgress(t, ip)
	r := newRunner(t, Config{Languages: []string{"python"}, Egress: proxy.New(e.Policy(t, true), nil)})
	prog := fmt.Sprintf(`import os, signal, socket, urllib.request
H = %d
me = os.getpid()
others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
opened = []
for p in others:
    for fd in (0, 1, 2):
        try:
            os.close(os.open("/proc/%%d/fd/%%d" %% (p, fd), os.O_WRONLY))
            opened.append((p, fd))
        except OSError:
            pass
print("forge:", "opened %%s" %% opened if opened else "refused")
print("before:", urllib.request.urlopen("http://allowed.test:%%d/" %% H, timeout=15).read().decode())
for p in others:
    try:
        os.kill(p, signal.SIGKILL)
    except OSError:
        pass
while True:
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", 3128))
    except OSError:
        break
    finally:
        s.close()
try:
    print("after:", urllib.request.urlopen("http://allowed.test:%%d/" %% H, timeout=15).read().decode())
except Exception as e:
    print("after: refused", e)
`, e.HTTPPort)
	res := run(t, r, sandboxtest.Req("python", prog))
	if res.ExitCode != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	for name, want := range map[string]string{"forge": "refused", "before": "plain-ok", "after": "refused"} {
		if got := sandboxtest.Line(res.Stdout, name); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %q\nstdout:\n%s", name, got, want, res.Stdout)
		}
	}
	if res.Network == nil || len(res.Network.Reached) != 1 || res.Network.Reached[0].Connections != 1 {
		t.Errorf("report %+v, want allowed.test reached once", res.Network)
	}
	// A fresh pod, a fresh relay.
	res = run(t, r, sandboxtest.Req("python", fmt.Sprintf(`import urllib.request
print(urllib.request.urlopen("http://allowed.test:%d/", timeout=15).read().decode())`, e.HTTPPort)))
	if res.Stdout != "plain-ok\n" {
		t.Fatalf("the next run: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

// TestNoEgressNoProxy: without an allowlist nothing of the relay is there:
// no proxy variables, nothing listening at the proxy's address, no network
// policy, no report.
func TestNoEgressNoProxy(t *testing.T) {
	r := newRunner(t, Config{Languages: []string{"python"}})
	if r.Capabilities().Egress != nil {
		t.Fatalf("a network policy without egress: %+v", r.Capabilities().Egress)
	}
	res := run(t, r, sandboxtest.Req("python", `import os, socket
print(os.environ.get("HTTPS_PROXY"))
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=3).close()
    print("listening")
except OSError:
    print("nothing")`))
	if res.Stdout != "None\nnothing\n" || res.Network != nil {
		t.Fatalf("stdout %q stderr %q network %+v", res.Stdout, res.Stderr, res.Network)
	}
}

// BenchmarkEgress measures what the allowlist costs a run: a one-line
// program on a cold pod and on a warm one (compare BenchmarkRun; a cold
// pod starts its relay before its program, a warm one did it ahead), and
// the latency of one HTTP request through the relay and the proxy (a new
// connection each, as urllib makes), reported as ms/request.
//
//	KUBECONFIG=$(sudo .ci/ensure-kubernetes.sh) CODE_EXEC_REQUIRE_K8S=1 go test ./sandbox/kube/ -run '^$' -bench Egress -benchtime 20x
func BenchmarkEgress(b *testing.B) {
	e := sandboxtest.StartEgress(b, sandboxtest.HostListenerIP())
	for _, mode := range []struct {
		name string
		pool int
	}{{"cold", 0}, {"warm", 2}} {
		b.Run(mode.name, func(b *testing.B) {
			cfg := poolConfig(mode.pool, "python")
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.Egress = proxy.New(e.Policy(b, true), nil)
			r := newRunner(b, cfg)
			req := sandboxtest.Req("python", "print(2**64)")
			req.Limits = kubetest.Limits(req.Limits)
			for b.Loop() {
				if mode.pool > 0 {
					b.StopTimer()
					waitWarm(b, r, "python", 1)
					b.StartTimer()
				}
				benchRun(b, r, req, "18446744073709551616\n")
			}
		})
	}
	b.Run("request", func(b *testing.B) {
		cfg := Config{Languages: []string{"python"}, Logger: slog.New(slog.DiscardHandler), Egress: proxy.New(e.Policy(b, true), nil)}
		r := newRunner(b, cfg)
		const n = 50
		req := sandboxtest.Req("python", fmt.Sprintf(`import time, urllib.request
url = "http://allowed.test:%d/"
urllib.request.urlopen(url, timeout=15).read()
t = time.perf_counter()
for _ in range(%d):
    urllib.request.urlopen(url, timeout=15).read()
print((time.perf_counter() - t) / %d * 1000)`, e.HTTPPort, n, n))
		req.Limits = kubetest.Limits(req.Limits)
		var total float64
		for b.Loop() {
			res, err := r.Run(b.Context(), req)
			if err != nil {
				b.Fatal(err)
			}
			ms, err := strconv.ParseFloat(strings.TrimSpace(res.Stdout), 64)
			if err != nil {
				b.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			total += ms
		}
		b.ReportMetric(total/float64(b.N), "ms/request")
	})
}
