package kube

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// TestEgressAllowlist runs the shared egress check in kubernetes mode: the
// run's pod reaches the allowed listeners only through its relay and the
// proxy, is refused the rest, and its result reports both; a warm pod's
// relay and session, started before its run, report that run's alone.
func TestEgressAllowlist(t *testing.T) {
	t.Parallel()
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
			if tc.allowPrivate {
				// A run's own allowlist (a principal's network) narrows
				// the proxy's, in a warm pod, a cold one and a session's.
				e.CheckNarrowedEgress(t, runner, kubetest.Sessions{Backend: r.Sessions()})
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
	t.Parallel()
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
	t.Parallel()
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
// connection each, as urllib makes), reported as ms/request; and a
// session's call without the allowlist and with it.
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
	b.Run("session", func(b *testing.B) {
		// A session's call, without the allowlist and with it (each such
		// call has a relay of its own, exec'd as the call before ended),
		// back to back and with a client's pause between calls (not
		// timed: the calls are).
		for _, c := range []struct {
			allow bool
			think time.Duration
		}{{false, 0}, {true, 0}, {false, 500 * time.Millisecond}, {true, 500 * time.Millisecond}} {
			allow := c.allow
			b.Run(fmt.Sprintf("%s/think=%s", map[bool]string{false: "open", true: "allowlist"}[allow], c.think), func(b *testing.B) {
				cfg := Config{Languages: []string{"python"}, Logger: slog.New(slog.DiscardHandler)}
				if allow {
					cfg.Egress = proxy.New(e.Policy(b, true), nil)
				}
				r := newRunner(b, cfg)
				s, err := r.Sessions().Start(b.Context(), sessions.Spec{ID: "ses_bench", Language: "python",
					Limits: kubetest.Limits(sandboxtest.DefaultLimits()), Deadline: time.Now().Add(time.Hour)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				req := sandboxtest.Req("python", "print(2**64)")
				for b.Loop() {
					if c.think > 0 {
						b.StopTimer()
						time.Sleep(c.think)
						b.StartTimer()
					}
					res, err := s.Exec(b.Context(), req)
					if err != nil || res.Stdout != "18446744073709551616\n" {
						b.Fatalf("%v: stdout %q stderr %q", err, res.Stdout, res.Stderr)
					}
				}
			})
		}
	})
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

// TestSessionEgress runs the shared session egress check in kubernetes
// mode: a session's pod reaches the allowed listeners only through its
// relay and the proxy, call after call, is refused the rest, and each
// call's result reports that call's alone; what a call leaves running makes
// no request after it.
func TestSessionEgress(t *testing.T) {
	t.Parallel()
	ip := sandboxtest.HostListenerIP()
	e := sandboxtest.StartEgress(t, ip)
	for _, allowPrivate := range []bool{true, false} {
		t.Run(fmt.Sprintf("private allowed %v", allowPrivate), func(t *testing.T) {
			r := newRunner(t, Config{Languages: []string{"python", "bash"}, Egress: proxy.New(e.Policy(t, allowPrivate), nil)})
			e.CheckSessionEgress(t, kubetest.Sessions{Backend: r.Sessions()}, allowPrivate, sandboxtest.RawTargets(ip)...)
		})
	}
}

// pyRelay is pyClients and relay(), the pid of the session pod's relay:
// the process whose parent is outside the pod and whose last argument is
// the relay's port; and get(), a request to allowed.test through the proxy.
const pyRelay = pyClients + `import urllib.request
def relay():
    for p in clients():
        try:
            if open('/proc/%d/cmdline' % p, 'rb').read().rstrip(b'\0').split(b'\0')[-1] == b'3128':
                return p
        except OSError:
            pass
    return 0
def gone(p):
    try:
        return open('/proc/%d/stat' % p).read().split(') ')[1][0] in 'ZX'
    except OSError:
        return True
def get(timeout=15):
    try:
        return urllib.request.urlopen("http://allowed.test:%d/" % PORT, timeout=timeout).read().decode()
    except Exception as e:
        return "refused %s" % e
`

// TestSessionEgressRelay: each call of a session pod has a relay of its
// own, started before the call's code runs and ended with the call (its
// process killed, its stream ended), after a timeout's reset too; the
// session's code can neither write into its stream nor trace it; when the
// code kills it, the rest of that call has no network (never more); a call
// that stops it, with a request queued on it, has that request forwarded
// in no later call (CheckStoppedRelay); a call after a killed client (its
// state lost, every process of the pod killed) has a relay too; while the
// code holds the relay's port, a call has no network and its stderr says
// so. Each call's report is its own. Close ends the proxy session.
func TestSessionEgressRelay(t *testing.T) {
	t.Parallel()
	e := sandboxtest.StartEgress(t, sandboxtest.HostListenerIP())
	r := newRunner(t, Config{Languages: []string{"python"}, Egress: proxy.New(e.Policy(t, true), nil)})
	s := startSession(t, r, "python", sandboxtest.DefaultLimits())
	prelude := fmt.Sprintf("PORT = %d\n", e.HTTPPort) + pyRelay
	call := func(code string, timeout time.Duration) *sandbox.Result {
		t.Helper()
		return sessionCall(t, s, "python", prelude+code, timeout)
	}
	// reached checks what the call printed and that its report has
	// allowed.test reached n times (once, or not at all).
	reached := func(what string, res *sandbox.Result, want map[string]string, n int) {
		t.Helper()
		for name, w := range want {
			if got := sandboxtest.Line(res.Stdout, name); !strings.HasPrefix(got, w) {
				t.Fatalf("%s: %s: %q, want %q\nstdout:\n%s\nstderr:\n%s", what, name, got, w, res.Stdout, res.Stderr)
			}
		}
		switch {
		case res.Network == nil:
			t.Fatalf("%s: no network report", what)
		case n == 0 && len(res.Network.Reached) != 0:
			t.Fatalf("%s: reached %+v, want nothing", what, res.Network.Reached)
		case n > 0 && (len(res.Network.Reached) != 1 || res.Network.Reached[0].Connections != n):
			t.Fatalf("%s: reached %+v, want allowed.test %d time(s): the call's own", what, res.Network.Reached, n)
		}
	}
	const getRelay = `print("get:", get())
print("relay:", relay())
`
	// ended checks that the relay of the call that printed res is gone
	// in the pod (the next call's code looks) and its stream ended here,
	// and that the next call has the relay started ahead as res's call
	// ended.
	ended := func(what string, res *sandbox.Result) string {
		t.Helper()
		p := sandboxtest.Line(res.Stdout, "relay")
		s.egress.l.mu.Lock()
		cur := s.egress.l.cur
		s.egress.l.mu.Unlock()
		if s.egress.relay != nil || cur == nil || !isClosed(cur.done) {
			t.Fatalf("%s: the relay's stream did not end with the call", what)
		}
		s.egress.mu.Lock()
		a := s.egress.ahead
		s.egress.mu.Unlock()
		if a == nil {
			t.Fatalf("%s: no relay started ahead for the next call", what)
		}
		<-a.done // bounded by relayStartTimeout
		if a.err != nil {
			t.Fatalf("%s: the relay started ahead for the next call: %v", what, a.err)
		}
		next := a.x.mux.Pid()
		if got := sandboxtest.Line(call(fmt.Sprintf("print('gone:', gone(%s), relay())", p), 0).Stdout, "gone"); got != fmt.Sprintf("True %d", next) {
			t.Fatalf("%s: the call's relay %s after its end: gone, and the next call's relay: %q, want True %d (the one started ahead)", what, p, got, next)
		}
		return p
	}
	res := call(getRelay+`p = relay()
try:
    open('/proc/%d/fd/1' % p, 'wb').write(b'L\0\0\0\0\0\0\0\x04 1 1')
    print('forge: written')
except OSError:
    print('forge: denied')
print('trace:', 'traced' if ctypes.CDLL(None).ptrace(16, p, 0, 0) == 0 else 'denied')
`, 0)
	reached("the first call", res, map[string]string{"get": "plain-ok", "forge": "denied", "trace": "denied"}, 1)
	first := ended("the first call", res)

	// A timeout resets the session: every process of the pod but the
	// supervisor is killed, the relay with them.
	res = call(`print("relay:", relay(), flush=True)
time.sleep(600)`, 3*time.Second)
	if !res.TimedOut || !res.StateLost {
		t.Fatalf("timed out %v, state lost %v: want both", res.TimedOut, res.StateLost)
	}
	ended("the call that timed out", res)
	res = call(getRelay, 0)
	reached("the call after a timeout", res, map[string]string{"get": "plain-ok"}, 1)

	// A killed client: the server kills every process of the pod but the
	// supervisor, the relay with them.
	res = call(`print("get:", get())
for p in clients():
    if p != relay():
        os.kill(p, signal.SIGKILL)
time.sleep(60)`, 0)
	if !res.StateLost || res.Signal != "killed" {
		t.Fatalf("the call that kills its client: state lost %v, signal %q", res.StateLost, res.Signal)
	}
	res = call(getRelay, 0)
	reached("the call after a killed client", res, map[string]string{"get": "plain-ok"}, 1)
	if second := sandboxtest.Line(res.Stdout, "relay"); second == first || second == "0" {
		t.Fatalf("the relay after a killed client: %s, want a new one (the first was %s)", second, first)
	}

	// The code kills the relay: no network for the rest of the call.
	res = call(`print("before:", get())
p = relay()
os.kill(p, signal.SIGKILL)
while not gone(p):
    time.sleep(0.01)
print("after:", get())`, 0)
	reached("the call that kills the relay", res, map[string]string{"before": "plain-ok", "after": "refused"}, 1)
	res = call(getRelay, 0)
	reached("the call after the relay was killed", res, map[string]string{"get": "plain-ok"}, 1)

	// The code stops the relay: it ends with the call all the same, and
	// the next call has a relay of its own.
	res = call(`os.kill(relay(), signal.SIGSTOP)
print("relay:", relay())`, 0)
	reached("the call that stops the relay", res, nil, 0)
	ended("the call that stops the relay", res)
	res = call(getRelay, 0)
	reached("the call after the relay was stopped", res, map[string]string{"get": "plain-ok"}, 1)
	// Nor does a request that it left queued on the stopped relay reach
	// the server in a later call, nor is it charged to one.
	e.CheckStoppedRelay(t, kubetest.Sessions{Backend: r.Sessions()})

	// The code kills the relay and holds its port in the interpreter: the
	// next call has no network, and says so; once the port is free, the
	// call after it has a relay again.
	res = call(`p = relay()
os.kill(p, signal.SIGKILL)
while not gone(p):
    time.sleep(0.01)
taken = socket.socket()
taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
taken.bind(("127.0.0.1", 3128))
taken.listen()
print("taken: yes")`, 0)
	reached("the call that takes the relay's port", res, map[string]string{"taken": "yes"}, 0)
	res = call(`print("get:", get(timeout=3))
taken.close()`, 0)
	reached("the call while the port is taken", res, map[string]string{"get": "refused"}, 0)
	if !strings.HasPrefix(res.Stderr, "codeexec: the egress relay could not be started again") {
		t.Fatalf("the call without relay: stderr %q, want it to say that it has no network", res.Stderr)
	}
	res = call(getRelay, 0)
	reached("the call after the port was freed", res, map[string]string{"get": "plain-ok"}, 1)

	ended("the call after the port was freed", res)

	// Close ends the proxy session's listener.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !isClosed(s.egress.l.done) {
		t.Fatal("the proxy session's listener did not end with the session")
	}
}
