package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Egress is the shared test of CODE_EXEC_NETWORK=allowlist: listeners that
// the test starts on this machine, names pinned to their address, and a
// python program that tries, from inside the sandbox, every way out.
//
// Nothing here sends traffic beyond this machine or asks DNS: every name is
// pinned, and the names that are refused are refused before resolution.
type Egress struct {
	// IP is the address the listeners are on (loopback, or a Docker
	// bridge's own address).
	IP string
	// HTTPPort serves plain HTTP, TLSPort HTTPS (the test server's
	// certificate; the program does not verify it).
	HTTPPort, TLSPort int
	// background counts the plain HTTP requests for /bg.
	background *atomic.Int64
}

// StartEgress starts an HTTP and an HTTPS listener on ip; t's cleanup
// closes them.
func StartEgress(t testing.TB, ip string) *Egress {
	t.Helper()
	background := new(atomic.Int64)
	h := func(kind string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/bg" {
				background.Add(1)
			}
			fmt.Fprintf(w, "%s-ok", kind)
		})
	}
	listen := func() net.Listener {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatalf("listening on %s: %v", ip, err)
		}
		return l
	}
	hs := &httptest.Server{Listener: listen(), Config: &http.Server{Handler: h("plain")}}
	hs.Start()
	t.Cleanup(hs.Close)
	ts := &httptest.Server{Listener: listen(), Config: &http.Server{Handler: h("tls")}}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return &Egress{
		IP:         ip,
		HTTPPort:   hs.Listener.Addr().(*net.TCPAddr).Port,
		TLSPort:    ts.Listener.Addr().(*net.TCPAddr).Port,
		background: background,
	}
}

// Resolve is the CODE_EXEC_NETWORK_RESOLVE value of the test: allowed.test,
// private.test and notlisted.test all pinned to the listeners' address.
func (e *Egress) Resolve() string {
	return fmt.Sprintf("allowed.test=%s,private.test=%s,notlisted.test=%s", e.IP, e.IP, e.IP)
}

// Allow is the CODE_EXEC_NETWORK_ALLOW value of the test: allowed.test on
// the two listeners' ports and private.test on the HTTP port.
func (e *Egress) Allow() []string {
	return []string{
		"allowed.test:" + strconv.Itoa(e.HTTPPort),
		"allowed.test:" + strconv.Itoa(e.TLSPort),
		"private.test:" + strconv.Itoa(e.HTTPPort),
	}
}

// Policy is the test's policy. With allowPrivate off, the names pinned to
// a loopback or bridge address are refused as private: use it to test that
// refusal; with it on, allowed.test is reached.
func (e *Egress) Policy(t testing.TB, allowPrivate bool) egress.Policy {
	t.Helper()
	allow, err := egress.ParseAllowlist(e.Allow())
	if err != nil {
		t.Fatal(err)
	}
	pins, err := egress.ParsePins(e.Resolve())
	if err != nil {
		t.Fatal(err)
	}
	return egress.Policy{
		Allow:        allow,
		AllowPrivate: allowPrivate,
		Resolver:     pins, // pins only: nothing reaches DNS
		Caps:         egress.Caps{Connections: 32, Bytes: 1 << 20, ConnectTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second},
	}
}

// Program is the python program that tries every way out and prints one
// line per attempt: "<name>: <outcome>". rawIPs are addresses a raw socket
// tries on the HTTP port, bypassing the proxy.
func (e *Egress) Program(rawIPs ...string) string {
	var raws []string
	for _, ip := range rawIPs {
		raws = append(raws, strconv.Quote(ip))
	}
	return fmt.Sprintf(`import os, socket, ssl, sys, urllib.request, urllib.error
H, T = %d, %d
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=15, context=ctx if url.startswith("https") else None) as r:
            return "%%d %%s" %% (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "HTTP %%d" %% e.code
    except Exception as e:
        return "refused %%s" %% e
print("proxy:", os.environ.get("HTTPS_PROXY"), "no_proxy=%%r" %% os.environ.get("NO_PROXY"))
print("http:", get("http://allowed.test:%%d/hello" %% H))
print("connect:", get("https://allowed.test:%%d/secret" %% T))
print("notlisted:", get("http://notlisted.test:%%d/" %% H))
print("port:", get("https://allowed.test:%%d/" %% (T + 1 if T + 1 != H else T + 2)))
print("private:", get("http://private.test:%%d/" %% H))
for ip in [%s]:
    try:
        socket.create_connection((ip, H), timeout=3).close()
        print("raw %%s: connected" %% ip)
    except OSError as e:
        print("raw %%s: refused %%s" %% (ip, e))
`, e.HTTPPort, e.TLSPort, strings.Join(raws, ", "))
}

// Line returns the outcome the program printed for name.
func Line(stdout, name string) string {
	for _, l := range strings.Split(stdout, "\n") {
		if v, ok := strings.CutPrefix(l, name+": "); ok {
			return v
		}
	}
	return "(no line " + name + ")"
}

// CheckEgress runs the program on r, whose runs go through a proxy with
// e.Policy(t, allowPrivate), and checks both what the program saw and the
// run's report. rawIPs are the addresses to try with raw sockets; every one
// must fail.
func (e *Egress) CheckEgress(t *testing.T, r sandbox.Runner, allowPrivate bool, rawIPs ...string) *sandbox.Result {
	t.Helper()
	return e.check(t, r.Run, "python", allowPrivate, rawIPs...)
}

// CheckSessionEgress is CheckEgress for the sessions of b, whose programs
// go through a proxy with e.Policy(t, allowPrivate): in a python session,
// the program reaches what a run reaches, call after call, and each call's
// report is its own (a call in between that reaches nothing reports
// nothing); in a bash session, a call that runs the program with python3
// does too.
func (e *Egress) CheckSessionEgress(t *testing.T, b sessions.Backend, allowPrivate bool, rawIPs ...string) {
	t.Helper()
	s := StartSession(t, b, "python")
	for i := range 2 {
		res := e.check(t, s.Exec, "python", allowPrivate, rawIPs...)
		for _, r := range res.Network.Reached {
			if r.Connections != 1 {
				t.Errorf("call %d: %d connections to %s:%d, want 1 (a report of its own)", 2*i+1, r.Connections, r.Host, r.Port)
			}
		}
		for _, r := range res.Network.Refused {
			if r.Count != 1 {
				t.Errorf("call %d: %d refusals of %s:%d, want 1 (a report of its own)", 2*i+1, r.Count, r.Host, r.Port)
			}
		}
		if i == 0 {
			res := SessionCall(t, s, "python", "x = 1")
			if res.Network == nil || !res.Network.Empty() {
				t.Errorf("a call that reached nothing: network report %+v, want an empty one", res.Network)
			}
		}
	}
	bs := StartSession(t, b, "bash")
	e.check(t, bs.Exec, "bash", allowPrivate, rawIPs...)
	if allowPrivate {
		e.checkLeftoverTraffic(t, b)
	}
}

// checkLeftoverTraffic: a thread and a process that a call leaves behind,
// each requesting allowed.test through the proxy in a loop, make no request
// once the call has returned, and nothing of them is charged to the next
// call.
func (e *Egress) checkLeftoverTraffic(t *testing.T, b sessions.Backend) {
	t.Helper()
	s := StartSession(t, b, "python")
	res := SessionCall(t, s, "python", fmt.Sprintf(`import subprocess, sys, threading, time, urllib.request
url = "http://allowed.test:%d/bg"
loop = """import sys, time, urllib.request
while True:
    try:
        urllib.request.urlopen(sys.argv[1], timeout=5).read()
    except Exception:
        pass
    time.sleep(0.01)
"""
sys.argv[1:] = [url]
threading.Thread(target=exec, args=(loop, {"__name__": "leftover"}), daemon=True).start()
subprocess.Popen([sys.executable, "-c", loop, url], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(urllib.request.urlopen(url, timeout=15).read().decode())
`, e.HTTPPort))
	if res.Stdout != "plain-ok\n" {
		t.Fatalf("the call that starts the leftovers: stdout %q stderr %q", res.Stdout, abbrev(res.Stderr))
	}
	after := e.background.Load()
	res = SessionCall(t, s, "python", "import time\ntime.sleep(0.3)\nprint('quiet')")
	if res.Network != nil && !res.Network.Empty() {
		t.Errorf("the next call was charged the leftovers' traffic: %+v", res.Network)
	}
	if n := e.background.Load(); n != after {
		t.Errorf("%d requests came from what an earlier call left running, after it had ended", n-after)
	}
}

// check runs the program with run (as python, or through python3 from
// bash) and checks what it saw and its report.
func (e *Egress) check(t *testing.T, run func(context.Context, sandbox.Request) (*sandbox.Result, error), lang string, allowPrivate bool, rawIPs ...string) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := e.Program(rawIPs...)
	if lang == "bash" {
		code = "python3 - <<'CODEEXEC_EOF'\n" + code + "CODEEXEC_EOF\n"
	}
	res, err := run(ctx, Req(lang, code))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := res.Stdout
	if res.ExitCode != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.ExitCode, out, res.Stderr)
	}
	if got := Line(out, "proxy"); !strings.HasPrefix(got, "http://") || !strings.HasSuffix(got, "no_proxy=''") {
		t.Errorf("proxy environment = %q, want HTTPS_PROXY set and NO_PROXY empty", got)
	}
	expect := map[string]string{
		"notlisted": "HTTP 403", // plain HTTP: the proxy answers 403
		"port":      "refused",  // CONNECT: the tunnel is refused with 403
		"private":   "HTTP 403",
	}
	if allowPrivate {
		expect["http"] = "200 plain-ok"
		expect["connect"] = "200 tls-ok"
		expect["private"] = "200 plain-ok"
	} else {
		expect["http"] = "HTTP 403"
		expect["connect"] = "refused"
	}
	for name, want := range expect {
		if got := Line(out, name); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %q\nstdout:\n%s", name, got, want, out)
		}
	}
	for _, ip := range rawIPs {
		if got := Line(out, "raw "+ip); !strings.HasPrefix(got, "refused") {
			t.Errorf("raw socket to %s: %q, want refused", ip, got)
		}
	}
	t.Logf("the program saw:\n%s", out)
	e.checkReport(t, res.Network, allowPrivate)
	return res
}

func (e *Egress) checkReport(t *testing.T, rep *egress.Report, allowPrivate bool) {
	t.Helper()
	if rep == nil {
		t.Fatal("the result has no network report")
	}
	reached := map[string]bool{}
	for _, r := range rep.Reached {
		reached[net.JoinHostPort(r.Host, strconv.Itoa(r.Port))] = true
	}
	refused := map[string]egress.Reason{}
	for _, r := range rep.Refused {
		refused[net.JoinHostPort(r.Host, strconv.Itoa(r.Port))] = r.Reason
	}
	hp := func(h string, p int) string { return net.JoinHostPort(h, strconv.Itoa(p)) }
	wrongPort := e.TLSPort + 1
	if wrongPort == e.HTTPPort {
		wrongPort++
	}
	wantRefused := map[string]egress.Reason{
		hp("notlisted.test", e.HTTPPort): egress.ReasonNotAllowed,
		hp("allowed.test", wrongPort):    egress.ReasonPort,
	}
	var wantReached []string
	if allowPrivate {
		wantReached = []string{hp("allowed.test", e.HTTPPort), hp("allowed.test", e.TLSPort), hp("private.test", e.HTTPPort)}
	} else {
		wantRefused[hp("allowed.test", e.HTTPPort)] = egress.ReasonPrivateAddress
		wantRefused[hp("allowed.test", e.TLSPort)] = egress.ReasonPrivateAddress
		wantRefused[hp("private.test", e.HTTPPort)] = egress.ReasonPrivateAddress
	}
	for _, d := range wantReached {
		if !reached[d] {
			t.Errorf("report: %s not reached; report %+v", d, rep)
		}
	}
	if len(rep.Reached) != len(wantReached) {
		t.Errorf("report: reached %+v, want %v", rep.Reached, wantReached)
	}
	for d, reason := range wantRefused {
		if refused[d] != reason {
			t.Errorf("report: %s refused for %q, want %q; report %+v", d, refused[d], reason, rep)
		}
	}
	if len(rep.Refused) != len(wantRefused) {
		t.Errorf("report: refused %+v, want %v", rep.Refused, wantRefused)
	}
}

// HostAddress is an IPv4 address of this host's that is not loopback and
// not docker0's ("" when there is none): where a pod of the test cluster,
// whose node is this machine, would reach a service of the host if its
// network were open.
func HostAddress() string {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 || ifc.Name == "docker0" {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLinkLocalUnicast() {
				return ipn.IP.String()
			}
		}
	}
	return ""
}

// HostListenerIP is where a test's egress listeners go when the sandbox's
// network is another machine's, as a pod's is: HostAddress, which the
// proxy (in the test's process) reaches and a sandbox without network must
// not, or loopback when the host has no other address that the proxy may
// reach with private addresses allowed (an address of a documentation
// range, as some test machines have, is refused always).
func HostListenerIP() string {
	if ip := HostAddress(); ip != "" {
		if ok, _ := egress.Permitted(netip.MustParseAddr(ip), true); ok {
			return ip
		}
	}
	return "127.0.0.1"
}

// RawTargets are the addresses a program's raw sockets try, bypassing the
// proxy: the sandbox's own loopback, the listeners' address ip and this
// host's address.
func RawTargets(ip string) []string {
	targets := []string{"127.0.0.1"}
	for _, a := range []string{ip, HostAddress()} {
		if a != "" && !slices.Contains(targets, a) {
			targets = append(targets, a)
		}
	}
	return targets
}

// CheckNarrowedEgress checks, on r and in a python session of b (nil for
// none), whose programs go through a proxy with e.Policy(t, true), that a
// run's own allowlist (sandbox.Request.Network, sessions.Spec.Network)
// narrows the proxy's: with only allowed.test's HTTP port on it, the
// program reaches that and nothing else the proxy allows (allowed.test's
// TLS port and private.test are refused, and said so in the
// report, allowed.test's TLS port for its port); with an empty one, it
// reaches nothing.
func (e *Egress) CheckNarrowedEgress(t *testing.T, r sandbox.Runner, b sessions.Backend) {
	t.Helper()
	only, err := egress.ParseAllowlist([]string{"allowed.test:" + strconv.Itoa(e.HTTPPort)})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, res *sandbox.Result, err error, none bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		want := map[string]string{"http": "200 plain-ok", "connect": "refused", "private": "HTTP 403"}
		if none {
			want["http"] = "HTTP 403"
		}
		for name, w := range want {
			if got := Line(res.Stdout, name); !strings.HasPrefix(got, w) {
				t.Errorf("%s: %s: %q, want %q\nstdout:\n%s\nstderr:\n%s", what, name, got, w, res.Stdout, res.Stderr)
			}
		}
		if res.Network == nil {
			t.Fatalf("%s: no network report", what)
		}
		refused := map[string]egress.Reason{}
		for _, f := range res.Network.Refused {
			refused[net.JoinHostPort(f.Host, strconv.Itoa(f.Port))] = f.Reason
		}
		wantRefused := map[string]egress.Reason{
			// allowed.test is on the run's list, but not this port.
			net.JoinHostPort("allowed.test", strconv.Itoa(e.TLSPort)):  egress.ReasonPort,
			net.JoinHostPort("private.test", strconv.Itoa(e.HTTPPort)): egress.ReasonNotAllowed,
		}
		if none {
			wantRefused[net.JoinHostPort("allowed.test", strconv.Itoa(e.TLSPort))] = egress.ReasonNotAllowed
			wantRefused[net.JoinHostPort("allowed.test", strconv.Itoa(e.HTTPPort))] = egress.ReasonNotAllowed
		}
		for d, reason := range wantRefused {
			if refused[d] != reason {
				t.Errorf("%s: %s refused for %q, want %q; report %+v", what, d, refused[d], reason, res.Network)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := Req("python", e.Program())
	req.Network = only
	res, err := r.Run(ctx, req)
	check("a run with its own allowlist", res, err, false)
	req.Network = &egress.Allowlist{}
	res, err = r.Run(ctx, req)
	check("a run with an empty allowlist", res, err, true)
	if b == nil {
		return
	}
	s, err := b.Start(ctx, sessions.Spec{ID: "ses_narrow", Language: "python", Limits: DefaultLimits(), Deadline: time.Now().Add(time.Hour), Network: only})
	if err != nil {
		t.Fatalf("starting a session with its own allowlist: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	res, err = s.Exec(ctx, Req("python", e.Program()))
	check("a session call with the session's own allowlist", res, err, false)
}

// CheckStoppedRelay, for a mode whose sessions reach the proxy through a
// relay in the session's sandbox (docker mode's, a child of the session's
// PID 1; kubernetes mode's, exec'd into the pod from outside, its last
// argument the proxy's port): a call that stops the relay and leaves a
// request queued on its listener, on a connection it keeps open in the
// session's state, cannot have it forwarded by a later call that continues
// the relay. The relay of the call has ended with it, and the queued
// connection too: nothing reaches the server, and nothing is charged.
func (e *Egress) CheckStoppedRelay(t *testing.T, b sessions.Backend) {
	t.Helper()
	s := StartSession(t, b, "python")
	res := SessionCall(t, s, "python", fmt.Sprintf(`import os, signal, socket
host, port = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/").rsplit(":", 1)
me = os.getpid()
stopped = []
for n in os.listdir("/proc"):
    if not n.isdigit() or int(n) in (1, me):
        continue
    try:
        with open("/proc/%%s/stat" %% n) as f:
            st = f.read()
    except OSError:
        continue
    state, ppid = st[st.rfind(")") + 2:].split()[:2]
    try:
        with open("/proc/%%s/cmdline" %% n, "rb") as f:
            last = f.read().rstrip(b"\0").split(b"\0")[-1].decode()
    except OSError:
        continue
    if (ppid == "1" or ppid == "0" and last == port) and state not in "ZX":
        os.kill(int(n), signal.SIGSTOP)
        stopped.append(int(n))
queued = socket.create_connection((host, int(port)))
queued.sendall(b"GET http://allowed.test:%d/bg HTTP/1.1\r\nHost: allowed.test:%d\r\nConnection: close\r\n\r\n")
print("stopped", len(stopped))
`, e.HTTPPort, e.HTTPPort))
	if !strings.HasPrefix(res.Stdout, "stopped ") || res.Stdout == "stopped 0\n" {
		t.Fatalf("the call that stops the relay: stdout %q stderr %q", res.Stdout, abbrev(res.Stderr))
	}
	before := e.background.Load()
	res = SessionCall(t, s, "python", `import os, signal
for p in stopped:
    try:
        os.kill(p, signal.SIGCONT)
    except OSError:
        pass
queued.settimeout(60)  # a bound on a hang only: the answer or the end comes at once
try:
    got = queued.recv(100)
    print("answered" if got else "closed", got[:40])
except OSError as e:
    print("closed", type(e).__name__)
`)
	if !strings.HasPrefix(res.Stdout, "closed") {
		t.Errorf("a request queued on the relay that an earlier call stopped was answered in a later call: stdout %q stderr %q", res.Stdout, abbrev(res.Stderr))
	}
	if res.Network != nil && !res.Network.Empty() {
		t.Errorf("the later call was charged the earlier call's queued request: %+v", res.Network)
	}
	if n := e.background.Load(); n != before {
		t.Errorf("%d requests that an earlier call queued reached the server in a later call", n-before)
	}
}
