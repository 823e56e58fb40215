package docker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestContainment attempts each escape a sandboxed program might try and
// asserts that it failed. The only addresses used are this host's address on
// the engine's bridge, where the test itself listens, and loopback inside the
// container; no name is ever resolved.
func TestContainment(t *testing.T) {
	r, cli := newRunner(t, Config{})

	t.Run("no outbound tcp to the host", func(t *testing.T) {
		ip := bridgeAddr(t, cli)
		trap := sandboxtest.ListenTCP(t, ip.String())
		port := trap.Port()
		code := fmt.Sprintf(`import socket
print("interfaces", sorted(n for _, n in socket.if_nameindex()))
for host in (%q, "127.0.0.1"):
    try:
        socket.create_connection((host, %d), timeout=3).close()
        print(host, "connected")
    except OSError as e:
        print(host, "blocked", e.errno)`, ip.String(), port)
		res := run(t, r, sandboxtest.Req("python", code))
		if !strings.Contains(res.Stdout, "interfaces ['lo']") {
			t.Errorf("the container has interfaces other than loopback: %q", res.Stdout)
		}
		if strings.Contains(res.Stdout, "connected") || strings.Count(res.Stdout, "blocked") != 2 {
			t.Fatalf("a connection got through: stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		if n := trap.Count(t); n > 0 {
			t.Fatalf("the host listener on %s:%d accepted %d connections from the sandbox", ip, port, n)
		}
	})

	t.Run("no dns or udp to the host", func(t *testing.T) {
		ip := bridgeAddr(t, cli)
		trap := sandboxtest.ListenUDP(t, ip.String())
		port := trap.Port()
		// A hand-made DNS query for "a." sent to a resolver address the test
		// controls; no name is ever looked up through the system resolver.
		code := fmt.Sprintf(`import socket
q = bytes.fromhex("12340100000100000000000001610000010001")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
try:
    s.sendto(q, (%q, %d))
    s.recvfrom(512)
    print("answered")
except OSError as e:
    print("blocked", e.errno)`, ip.String(), port)
		res := run(t, r, sandboxtest.Req("python", code))
		if !strings.HasPrefix(res.Stdout, "blocked") {
			t.Errorf("the UDP query was not refused: stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		if n := trap.Count(t); n > 0 {
			t.Fatalf("the host UDP listener received %d datagrams from the sandbox", n)
		}
	})

	t.Run("root filesystem is read-only", func(t *testing.T) {
		code := `for f in /etc/codeexec /usr/bin/codeexec /codeexec /var/tmp/codeexec /home/codeexec /root/codeexec; do
  if ( echo x > "$f" ) 2>/dev/null; then echo "wrote $f"; else echo "denied $f"; fi
done
echo x > /tmp/ok && echo "tmp writable"`
		res := run(t, r, sandboxtest.Req("bash", code))
		if strings.Contains(res.Stdout, "wrote ") || strings.Count(res.Stdout, "denied ") != 6 || !strings.Contains(res.Stdout, "tmp writable") {
			t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
	})

	t.Run("tmp is capped", func(t *testing.T) {
		req := sandboxtest.Req("python", `import errno
total = 0
chunk = b"x" * (1 << 20)
err = None
try:
    for i in range(64):
        with open("/tmp/fill%d" % i, "wb") as f:
            for _ in range(2):
                f.write(chunk)
                f.flush()
                total += len(chunk)
except OSError as e:
    err = errno.errorcode.get(e.errno)
print(total >> 20, err)
try:
    with open("/tmp/big", "wb") as f:
        f.write(b"y" * (16 << 20))
    print("big written")
except OSError as e:
    print("big", errno.errorcode.get(e.errno))`)
		req.Limits.FileSizeBytes = 8 << 20
		res := run(t, r, req)
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if len(lines) != 2 {
			t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		var mib int
		var errName string
		if _, err := fmt.Sscan(lines[0], &mib, &errName); err != nil || errName != "ENOSPC" || mib > 8 {
			t.Errorf("filling /tmp: wrote %d MiB then %q, want at most 8 MiB then ENOSPC", mib, errName)
		}
		if lines[1] != "big EFBIG" && lines[1] != "big ENOSPC" {
			t.Errorf("one 16 MiB file under an 8 MiB cap: %q, want EFBIG or ENOSPC", lines[1])
		}
	})

	t.Run("server environment is not visible", func(t *testing.T) {
		t.Setenv(sandboxtest.SecretName, sandboxtest.SecretValue)
		res := run(t, r, sandboxtest.Req("python", `import os
print(dict(os.environ))
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            print(open("/proc/%s/environ" % p, "rb").read())
        except OSError:
            pass`))
		if strings.Contains(res.Stdout+res.Stderr, sandboxtest.SecretValue) || strings.Contains(res.Stdout, sandboxtest.SecretName) {
			t.Fatalf("the server's secret reached the sandbox: %q", res.Stdout)
		}
		if !strings.Contains(res.Stdout, "'PATH'") {
			t.Fatalf("the program's own environment is missing: %q", res.Stdout)
		}
	})

	t.Run("fork bomb is bounded by the pids limit", func(t *testing.T) {
		req := sandboxtest.Req("python", `import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print("fork failed after", n, e.errno)`)
		req.Limits.Processes = 32
		req.Limits.Timeout = 20 * time.Second
		res := run(t, r, req)
		var n, errno int
		if _, err := fmt.Sscanf(res.Stdout, "fork failed after %d %d", &n, &errno); err != nil || n >= 32 {
			t.Fatalf("fork was not stopped by the pids limit: stdout %q stderr %q", res.Stdout, res.Stderr)
		}

		// The classic bomb; the main shell stays alive so that the bomb
		// runs until the timeout instead of dying with PID 1.
		bomb := sandboxtest.Req("bash", `b() { b | b & }; b; sleep 4`)
		bomb.Limits.Processes = 32
		bomb.Limits.Timeout = 3 * time.Second
		bomb.Limits.OutputBytes = 64 << 10
		res = run(t, r, bomb) // run fails the test if the bomb outlives its bound
		if !strings.Contains(res.Stderr, "Resource temporarily unavailable") {
			t.Errorf("the fork bomb never hit the pids limit: exit %d timedOut %v stderr %q", res.ExitCode, res.TimedOut, res.Stderr[:min(200, len(res.Stderr))])
		}
		t.Logf("fork bomb: exit %d, timedOut %v, truncated %v, %d bytes of stderr", res.ExitCode, res.TimedOut, res.Truncated, len(res.Stderr))
		next := run(t, r, sandboxtest.Req("python", "print(2**64)"))
		if next.Stdout != "18446744073709551616\n" {
			t.Fatalf("the run after a fork bomb: stdout %q stderr %q", next.Stdout, next.Stderr)
		}
	})

	t.Run("memory bomb is oom killed", func(t *testing.T) {
		req := sandboxtest.Req("python", `blocks = []
print("allocating", flush=True)
while True:
    blocks.append(b"x" * (8 << 20))`)
		req.Limits.MemoryBytes = 128 << 20
		res := run(t, r, req)
		if !res.OOMKilled || res.ExitCode != 137 || res.TimedOut {
			t.Fatalf("OOMKilled=%v exit=%d timedOut=%v stderr %q, want an OOM kill with exit 137", res.OOMKilled, res.ExitCode, res.TimedOut, res.Stderr)
		}
		if res.LimitHit() != "memory" {
			t.Fatalf("LimitHit() = %q, want memory", res.LimitHit())
		}
	})

	t.Run("a kill that is not ours is not called oom", func(t *testing.T) {
		res := run(t, r, sandboxtest.Req("bash", `kill -9 $$; echo unreachable`))
		// bash is PID 1 in its container, so it ignores its own SIGKILL;
		// use a child instead when it survives.
		if strings.Contains(res.Stdout, "unreachable") {
			res = run(t, r, sandboxtest.Req("bash", `bash -c 'kill -9 $$'; exit $?`))
		}
		if res.OOMKilled || res.ExitCode != 137 {
			t.Fatalf("OOMKilled=%v exit=%d stdout %q stderr %q, want exit 137 without an OOM report", res.OOMKilled, res.ExitCode, res.Stdout, res.Stderr)
		}
	})

	t.Run("output flood is truncated and stopped", func(t *testing.T) {
		req := sandboxtest.Req("bash", `while :; do echo out; echo err >&2; done`)
		req.Limits.OutputBytes = 32 << 10
		req.Limits.Timeout = 30 * time.Second
		// An endless flood that did not time out was stopped by the cap.
		res := run(t, r, req)
		if !res.Truncated || res.TimedOut {
			t.Fatalf("Truncated=%v TimedOut=%v", res.Truncated, res.TimedOut)
		}
		if n := len(res.Stdout) + len(res.Stderr); n > 32<<10 {
			t.Fatalf("kept %d bytes, over the cap", n)
		}
		if !strings.HasPrefix(res.Stdout, "out\n") || !strings.HasPrefix(res.Stderr, "err\n") {
			t.Fatalf("streams mixed up: stdout %q... stderr %q...", res.Stdout[:min(20, len(res.Stdout))], res.Stderr[:min(20, len(res.Stderr))])
		}
	})

	t.Run("nothing outlives its run", func(t *testing.T) {
		marker := sandboxtest.Marker()
		res := run(t, r, sandboxtest.Req("bash", fmt.Sprintf(`trap '' HUP TERM
setsid nohup sleep %[1]s >/dev/null 2>&1 < /dev/null &
disown -a
echo started`, marker)))
		if res.Stdout != "started\n" {
			t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		if sandboxtest.ProcessesAlive(t, marker) {
			t.Fatalf("a detached process outlived its run (marker %s)", marker)
		}
		if left := lingering(t, r, cli, time.Minute); len(left) != 0 {
			t.Fatalf("%d containers remain 10 s after the run", len(left))
		}
	})

	t.Run("no root, no capabilities", func(t *testing.T) {
		code := `echo "uid $(id -u)"
grep -E '^(CapEff|CapPrm|CapBnd)' /proc/self/status
python3 -c 'import ctypes; print("no_new_privs", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'
try() { if ( "$@" ) >/dev/null 2>&1; then echo "ALLOWED: $*"; else echo "denied: $*"; fi; }
try mount -t tmpfs none /tmp
try chown 10001 /etc/passwd
try chmod 777 /etc/shadow
try touch /etc/passwd
try su -c true
try sudo true
find / -xdev -perm /6000 -type f 2>/dev/null | sed 's/^/setuid: /'
python3 -c 'import os
try:
    os.setuid(0); print("ALLOWED: setuid(0)")
except OSError as e:
    print("denied: setuid(0)", e.errno)'`
		res := run(t, r, sandboxtest.Req("bash", code))
		out := res.Stdout
		t.Logf("attempts:\n%s%s", out, res.Stderr)
		if strings.Contains(out, "ALLOWED") || strings.Contains(out, "setuid: ") {
			t.Fatalf("a privileged operation succeeded:\n%s", out)
		}
		for _, want := range []string{"uid 10001", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "no_new_privs 1", "denied: setuid(0)"} {
			if !strings.Contains(out, want) {
				t.Errorf("missing %q in:\n%s", want, out)
			}
		}
		if strings.Count(out, "denied: ") != 7 {
			t.Errorf("want 7 denied operations:\n%s", out)
		}
	})
}
