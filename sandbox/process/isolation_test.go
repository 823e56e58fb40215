//go:build linux

package process_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// tcpProbe is a program that connects to addr and prints CONNECTED or the error.
func tcpProbe(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf(`import socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect((%q, %s))
    s.sendall(b"hello from the sandbox")
    print("CONNECTED")
except Exception as e:
    print("BLOCKED", type(e).__name__, e)`, host, port)
}

func TestNetworkNamespaceBlocksTCP(t *testing.T) {
	r := newRunnerWith(t)
	requireActive(t, r, "network namespace")
	trap := sandboxtest.ListenTCP(t, "127.0.0.1")
	addr := trap.Addr()
	res := runCode(t, r, "python", tcpProbe(addr))
	if !strings.HasPrefix(res.Stdout, "BLOCKED") {
		t.Fatalf("a sandboxed program reached the host's loopback listener %s: %q %q", addr, res.Stdout, res.Stderr)
	}
	if n := trap.Count(t); n > 0 {
		t.Fatalf("the host listener accepted %d connections from the sandbox", n)
	}
	// The isolated loopback still works inside the run.
	res = runCode(t, r, "python", `import socket
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.create_connection(srv.getsockname()); a, _ = srv.accept()
c.sendall(b"ping"); print(a.recv(4).decode())`)
	if res.Stdout != "ping\n" {
		t.Fatalf("loopback inside the run does not work: %q %q", res.Stdout, res.Stderr)
	}
}

// Forcing the feature off proves that the test above measures the namespace.
func TestNetworkReachableWhenTurnedOff(t *testing.T) {
	r := newRunnerWith(t, process.FeatureNetwork)
	if p := protection(r, "network namespace"); p.Active || !strings.Contains(p.Detail, "CODE_EXEC_PROCESS_DISABLE") {
		t.Fatalf("turned-off feature reported as %+v", p)
	}
	if p := protection(r, "network isolation"); p.Active {
		t.Fatalf("network isolation reported active with the namespace off")
	}
	trap := sandboxtest.ListenTCP(t, "127.0.0.1")
	res := runCode(t, r, "python", tcpProbe(trap.Addr()))
	if res.Stdout != "CONNECTED\n" {
		t.Fatalf("with the network namespace off the listener should be reachable: %q %q", res.Stdout, res.Stderr)
	}
	if n := trap.Count(t); n != 1 {
		t.Fatalf("the listener accepted %d connections from the run, want 1", n)
	}
}

func TestNetworkNamespaceBlocksDNS(t *testing.T) {
	r := newRunnerWith(t)
	requireActive(t, r, "network namespace")
	trap := sandboxtest.ListenUDP(t, "127.0.0.1")
	port := trap.Port()
	// A DNS query for a name under .invalid, sent to our own resolver stand-in.
	code := fmt.Sprintf(`import socket
q = bytes.fromhex("abcd01000001000000000000") + b"\x07codeexec\x07invalid\x00" + bytes.fromhex("00010001")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(q, ("127.0.0.1", %d)); print("SENT")
except Exception as e:
    print("BLOCKED", e)
try:
    socket.getaddrinfo("codeexec.invalid", 80); print("RESOLVED")
except Exception as e:
    print("NORESOLVE")`, port)
	res := runCode(t, r, "python", code)
	if strings.Contains(res.Stdout, "RESOLVED") {
		t.Fatalf("a name resolved inside the sandbox: %q", res.Stdout)
	}
	if n := trap.Count(t); n > 0 {
		t.Fatalf("the host's UDP listener received %d datagrams from the sandbox", n)
	}
}

func TestMountNamespaceHidesHostFiles(t *testing.T) {
	r := newRunnerWith(t)
	requireActive(t, r, "filesystem isolation")
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	secretDir, err := os.MkdirTemp(home, "codeexec-test-")
	if err != nil {
		t.Skipf("cannot write in %s: %v", home, err)
	}
	defer os.RemoveAll(secretDir)
	secret := filepath.Join(secretDir, "secret.txt")
	if err := os.WriteFile(secret, []byte("top-secret-host-file"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(secretDir, 0o755) // readable by anyone on the host: only isolation hides it
	_ = os.Chmod(home, 0o755)
	defer os.Chmod(home, 0o700)
	res := runCode(t, r, "bash", fmt.Sprintf(`cat %q; ls %q; ls /var/run/docker.sock /run /root 2>&1; true`, secret, home))
	if strings.Contains(res.Stdout, "top-secret-host-file") {
		t.Fatalf("a sandboxed program read %s", secret)
	}
	if strings.Contains(res.Stdout, "secret.txt") {
		t.Fatalf("a sandboxed program listed %s: %q", home, res.Stdout)
	}
	// Without the mount namespace, Landlock alone refuses opening, not
	// looking up: sandbox_info says so, and only the mount namespace
	// promises that the socket is not there.
	if protection(r, "mount namespace").Active && strings.Contains(res.Stdout, "docker.sock") && !strings.Contains(res.Stdout, "No such file") {
		t.Fatalf("the Docker socket is visible: %q", res.Stdout)
	}
}

func TestWritesOutsideTheRunDirectoryFail(t *testing.T) {
	workRoot := WorkRoot(t)
	r := newRunnerIn(t, workRoot)
	requireActive(t, r, "filesystem isolation")
	target := filepath.Join(t.TempDir(), "planted")
	_ = os.Chmod(filepath.Dir(target), 0o777)
	_ = os.Chmod(filepath.Dir(filepath.Dir(target)), 0o777)
	code := fmt.Sprintf(`for f in /usr/planted /etc/planted /planted /proc/planted %q; do
  if echo x > "$f" 2>/dev/null; then echo "WROTE $f"; fi
done
echo x > "$HOME/../planted" 2>/dev/null
echo ok > ./inside && cat ./inside`, target)
	res := runCode(t, r, "bash", code)
	if strings.Contains(res.Stdout, "WROTE") {
		t.Fatalf("a write outside the run directory succeeded: %q", res.Stdout)
	}
	// Beside the run directory is the run's private /tmp, never the host's.
	if left, _ := filepath.Glob(filepath.Join(workRoot, "codeexec-*", "planted")); len(left) > 0 {
		t.Fatalf("a file planted beside the run directory reached the host: %v", left)
	}
	if !strings.HasSuffix(res.Stdout, "ok\n") {
		t.Fatalf("writing inside the run directory failed: %q %q", res.Stdout, res.Stderr)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatalf("%s appeared on the host", target)
	}
}

func TestPIDNamespaceHidesTheServer(t *testing.T) {
	r := newRunnerWith(t)
	requireActive(t, r, "pid namespace")
	res := runCode(t, r, "bash", `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done`)
	if strings.Contains(res.Stdout, "-test.") || strings.Contains(res.Stdout, os.Args[0]+" -") {
		t.Fatalf("the server's process is visible from the sandbox:\n%s", res.Stdout)
	}
	if n := strings.Count(res.Stdout, "\n"); n > 8 {
		t.Fatalf("the sandbox sees %d processes; it should see only its own:\n%s", n, res.Stdout)
	}
}

// The program may signal its PID namespace's init, the supervisor; the run
// still ends normally and reports the program's own exit.
func TestSignallingTheSupervisor(t *testing.T) {
	r := newRunnerWith(t)
	requireActive(t, r, "pid namespace")
	res := runCode(t, r, "bash", `for s in QUIT USR1 USR2 TSTP ALRM PIPE HUP INT TERM; do kill -$s 1 2>/dev/null; done; sleep 0.2; echo still here; exit 7`)
	if res.ExitCode != 7 && res.Signal != "killed" {
		t.Fatalf("exit %d signal %q stdout %q stderr %q", res.ExitCode, res.Signal, res.Stdout, res.Stderr)
	}
	if strings.Contains(res.Stderr, "goroutine") {
		t.Fatalf("the supervisor dumped its goroutines into the program's stderr: %.300q", res.Stderr)
	}
	next := runCode(t, r, "python", "print(2**64)")
	if next.Stdout != "18446744073709551616\n" {
		t.Fatalf("next run: %q %q", next.Stdout, next.Stderr)
	}
}

func TestNoCapabilities(t *testing.T) {
	r := newRunnerWith(t)
	res := runCode(t, r, "bash", `grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status; grep NoNewPrivs /proc/self/status`)
	// A server that is root or maps a user namespace empties the bounding
	// set too; an ordinary user's server without one cannot (that takes
	// CAP_SETPCAP), and there no-new-privileges keeps the program from ever
	// gaining what the bounding set allows.
	emptiesBounding := os.Geteuid() == 0 || protection(r, "user namespace").Active
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		if strings.HasPrefix(line, "CapBnd") && !emptiesBounding {
			continue
		}
		if strings.HasPrefix(line, "Cap") && !strings.HasSuffix(line, "0000000000000000") {
			t.Fatalf("the program holds capabilities: %q", line)
		}
	}
	if !strings.Contains(res.Stdout, "NoNewPrivs:\t1") {
		t.Fatalf("no-new-privileges is not set: %q", res.Stdout)
	}
}

func TestStrictRefusesMissingProtection(t *testing.T) {
	_, err := process.New(context.Background(), process.Config{Languages: []string{"python"}, WorkRoot: WorkRoot(t), Disable: []process.Feature{process.FeatureMount}, Strict: true})
	if err == nil || !errors.Is(err, sandbox.ErrSandboxUnavailable) || !strings.Contains(err.Error(), "mount namespace") || !strings.Contains(err.Error(), "CODE_EXEC_PROCESS_STRICT") {
		t.Fatalf("strict mode with a protection turned off: err = %v", err)
	}
}

func TestEveryFeatureDegradesAlone(t *testing.T) {
	for _, f := range process.Features {
		t.Run(string(f), func(t *testing.T) {
			r := newRunnerWith(t, f)
			res := runCode(t, r, "python", "print(2**64)")
			if res.Stdout != "18446744073709551616\n" {
				t.Fatalf("with %s off: %q %q", f, res.Stdout, res.Stderr)
			}
			for _, p := range r.Capabilities().Protections {
				if strings.HasPrefix(p.Name, string(f)) && p.Active && p.Name != "unprivileged user" {
					t.Fatalf("%s is off but reported active: %+v", f, p)
				}
			}
		})
	}
}

func TestParseFeatures(t *testing.T) {
	got, err := process.ParseFeatures([]string{" Network", "mount", "network", ""})
	if err != nil || len(got) != 2 || got[0] != process.FeatureNetwork || got[1] != process.FeatureMount {
		t.Fatalf("ParseFeatures = %v, %v", got, err)
	}
	if _, err := process.ParseFeatures([]string{"selinux"}); err == nil || !strings.Contains(err.Error(), "known: user, pid") {
		t.Fatalf("unknown feature accepted: %v", err)
	}
}

// serverEnvironProbe tries to read the server's environment through /proc
// and prints READ with its size, or the error.
func serverEnvironProbe() string {
	return fmt.Sprintf(`try:
    with open("/proc/%d/environ", "rb") as f:
        print("READ", len(f.read()))
except OSError as e:
    print("REFUSED", e)
`, os.Getpid())
}

// The server must be out of reach of its runs in every combination that
// decides how (issue 10): hidden by the PID namespace, refused by Landlock,
// or non-dumpable; an ordinary user's server that maps a user namespace
// stays dumpable, so without the PID namespace and Landlock its user
// namespace must go.
func TestServerOutOfReach(t *testing.T) {
	for _, tc := range []struct {
		name    string
		disable []process.Feature
	}{
		{"default", nil},
		{"without the PID namespace", []process.Feature{process.FeaturePID}},
		{"without Landlock", []process.Feature{process.FeatureLandlock}},
		{"without the PID namespace and Landlock", []process.Feature{process.FeaturePID, process.FeatureLandlock}},
		{"without any kernel isolation", process.Features},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRunnerWith(t, tc.disable...)
			p := protection(r, "server out of reach")
			if !p.Active {
				t.Fatalf("server out of reach is not active: %+v", p)
			}
			res := runCode(t, r, "python", serverEnvironProbe())
			if !strings.HasPrefix(res.Stdout, "REFUSED") {
				t.Fatalf("a run read the server's environment (%s): %q %q", p.Detail, res.Stdout, res.Stderr)
			}
			user := protection(r, "user namespace")
			if os.Geteuid() != 0 && user.Active && !protection(r, "landlock").Active && !protection(r, "pid namespace").Active {
				t.Fatalf("an ordinary user's server maps a user namespace with neither the PID namespace nor Landlock: %+v", r.Capabilities().Protections)
			}
		})
	}
}

// On a host where the server's user cannot create user namespaces (CI runs
// this as an ordinary user inside a user namespace whose limit is 0, see
// .ci/nouserns), the namespaces are reported off with the host's reason,
// Landlock stays on, and runs work.
func TestWithoutUserNamespaces(t *testing.T) {
	if os.Getenv("CODE_EXEC_TEST_NO_USERNS") != "1" {
		t.Skip("set CODE_EXEC_TEST_NO_USERNS=1 on a host without user namespaces for the server's user (.ci/run does)")
	}
	if os.Geteuid() == 0 {
		t.Fatal("run this as an ordinary user")
	}
	r := newRunnerWith(t)
	user := protection(r, "user namespace")
	if user.Active || !strings.Contains(user.Detail, "user.max_user_namespaces") {
		t.Fatalf("user namespace: %+v, want inactive with the host's reason", user)
	}
	for _, name := range []string{"pid namespace", "network namespace", "ipc namespace", "uts namespace", "mount namespace", "network isolation", "unprivileged user"} {
		if p := protection(r, name); p.Active || p.Detail == "" {
			t.Errorf("%s: %+v, want inactive with a reason", name, p)
		}
	}
	for _, name := range []string{"landlock", "filesystem isolation", "server out of reach"} {
		if p := protection(r, name); !p.Active {
			t.Errorf("%s: %+v, want active", name, p)
		}
	}
	for lang, code := range map[string]string{"python": "print(2**64)", "javascript": "console.log(2n**64n)", "bash": "echo $((2**62))"} {
		res := runCode(t, r, lang, code)
		if res.ExitCode != 0 || res.Stdout == "" {
			t.Errorf("%s: exit %d, %q %q", lang, res.ExitCode, res.Stdout, res.Stderr)
		}
	}
	res := runCode(t, r, "python", "print(open('/etc/hostname').read() and 'read')\nopen('/root/x','w')")
	if !strings.Contains(res.Stderr, "PermissionError") {
		t.Errorf("Landlock does not hold without namespaces: %q %q", res.Stdout, res.Stderr)
	}
}

// TestIsolationIsDeclared: the typed isolation says what the protections in
// force say, with every feature on and with every feature off.
func TestIsolationIsDeclared(t *testing.T) {
	for _, c := range []struct {
		name    string
		disable []process.Feature
	}{{"all features", nil}, {"no features", process.Features}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRunnerWith(t, c.disable...)
			caps := r.Capabilities()
			iso := caps.Isolation
			for _, b := range []struct {
				name       string
				declared   bool
				protection string
			}{
				{"network", iso.Network, "network isolation"},
				{"filesystem", iso.Filesystem, "filesystem isolation"},
				{"identity", iso.Identity, "unprivileged user"},
				{"processes", iso.Processes, "pid namespace"},
				{"environment", iso.Environment, "scrubbed environment"},
			} {
				if p := protection(r, b.protection); b.declared != p.Active {
					t.Errorf("isolation.%s = %v, but the protection %q is active = %v (%s)", b.name, b.declared, b.protection, p.Active, p.Detail)
				}
			}
			if c.disable != nil && (iso.Network || iso.Filesystem || iso.Processes) {
				t.Errorf("with every feature off, isolation = %+v", iso)
			}
		})
	}
}
