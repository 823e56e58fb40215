package docker

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/mount"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
)

// Egress in docker mode (CODE_EXEC_NETWORK=allowlist).
//
// A run container keeps network mode none: its only interface is its own
// loopback, with no route to the host, the internet or DNS. Its one way out
// is a unix socket that the server listens on, made for that container
// alone and bind-mounted (read-only) at egressMount: the server serves the
// container's egress session on it, so the proxy knows which run every
// connection belongs to. Inside the container, before the program starts,
// the supervisor starts a small relay (python3, as the container's user)
// that listens on egressAddr on the loopback and passes each connection to
// the socket; HTTP_PROXY and HTTPS_PROXY point there.
//
// Why not an internal Docker network with the proxy on its gateway: a
// container on a bridge network, internal or not, reaches every service of
// the host that listens on all addresses (the gateway address is the
// host's), so the proxy would not be the only address it reaches. The relay
// can be killed or bypassed by the program only to reach the same socket:
// every policy decision is the server's.

const (
	// egressMount is where the run's socket directory appears in the container.
	egressMount = "/run/codeexec-egress"
	// egressSocket is the socket's name in that directory.
	egressSocket = "proxy.sock"
	// egressAddr is where the relay listens inside the container.
	egressHost = "127.0.0.1"
	egressPort = 3128
)

// egressAddr is the proxy address programs see.
var egressAddr = net.JoinHostPort(egressHost, strconv.Itoa(egressPort))

// relayProgram is the python relay: it listens on the loopback, then
// forks (so the supervisor starts the program only once it listens), and
// copies every connection to and from the unix socket in argv[1]. Given a
// listening socket's descriptor as argv[3] (a session's supervisor, which
// listens itself and runs this in a fork of its own), it serves that one
// and does not fork.
const relayProgram = `import os, socket, sys, threading
path, port = sys.argv[1], int(sys.argv[2])
if len(sys.argv) > 3:
    l = socket.socket(fileno=int(sys.argv[3]))
else:
    l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", port))
    l.listen(128)
    if os.fork():
        os._exit(0)
fd = os.open(os.devnull, os.O_RDWR)
for i in (0, 1, 2):
    os.dup2(fd, i)
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(c):
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        u.connect(path)
    except OSError:
        c.close()
        u.close()
        return
    t = threading.Thread(target=pipe, args=(u, c), daemon=True)
    t.start()
    pipe(c, u)
    t.join()
    c.close()
    u.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// relayLaunch is the shell line that starts the relay ahead of the
// supervisor script; python is the image's python3.
func relayLaunch(python string) string {
	return runproto.ShellQuoteAll([]string{python, "-I", "-S", "-c", relayProgram, egressMount + "/" + egressSocket, strconv.Itoa(egressPort)}) +
		" </dev/null >/dev/null 2>&1 || echo 'codeexec: the egress relay did not start; the program has no network' >&2\n"
}

// egressEnv is what a run container adds to containerEnv under egress.
func egressEnv() []string { return egress.ProxyEnv(egressAddr) }

// runEgress is one container's egress: its socket directory and session.
type runEgress struct {
	dir     string
	session *proxy.Session
}

// openEgress makes a container's socket directory and serves a session on
// its socket. The directory is searchable and the socket writable by any
// user, so that the container's user can connect to it; only that
// container has it mounted.
func (r *Runner) openEgress(name string) (*runEgress, error) {
	dir, err := os.MkdirTemp(r.egressDir, "run-")
	if err != nil {
		return nil, fmt.Errorf("docker: egress socket directory: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("docker: egress socket directory: %w", err)
	}
	path := filepath.Join(dir, egressSocket)
	l, err := net.Listen("unix", path)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("docker: egress socket: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		_ = l.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("docker: egress socket: %w", err)
	}
	return &runEgress{dir: dir, session: r.cfg.Egress.Serve(name, l)}, nil
}

// mount is the bind mount of the socket directory.
func (e *runEgress) mount() mount.Mount {
	return mount.Mount{Type: mount.TypeBind, Source: e.dir, Target: egressMount, ReadOnly: true}
}

// close ends the session and removes the directory; it returns the report.
// It is safe to call more than once.
func (e *runEgress) close() *egress.Report {
	rep := e.session.Close()
	_ = os.RemoveAll(e.dir)
	return rep
}

// prepareEgress makes the directory of the runs' sockets, then runs one
// container that reaches the proxy the way runs do: an image without
// python3, an engine on another host (the bind mount would not reach the
// socket) or a runtime that does not pass host unix sockets (gVisor by
// default) makes New fail here rather than every run fail later.
func (r *Runner) prepareEgress(ctx context.Context) error {
	if r.relayPython == "" {
		return fmt.Errorf("docker: %w: CODE_EXEC_NETWORK=allowlist needs python3 in the image %s (it runs the egress relay)", sandbox.ErrSandboxUnavailable, r.cfg.Image)
	}
	dir, err := os.MkdirTemp("", "codeexec-egress-")
	if err != nil {
		return fmt.Errorf("docker: egress socket directory: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("docker: egress socket directory: %w", err)
	}
	r.egressDir = dir
	cmd := []string{"/bin/sh", "-c", relayLaunch(r.relayPython) + "exec " + runproto.ShellQuoteAll([]string{r.relayPython, "-I", "-S", "-c", runproto.EgressCheckProgram(egressHost, egressPort)})}
	spec := containerSpec{role: roleProbe, cmd: cmd, limits: probeLimits, deadline: runDeadline(time.Now(), probeLimits.Timeout), egress: true}
	fail := func(detail string) error {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("docker: %w: CODE_EXEC_NETWORK=allowlist: a container cannot reach the egress proxy through the unix socket bind-mounted from %s (the engine must run on this host, and its runtime must pass host unix sockets): %s", sandbox.ErrSandboxUnavailable, dir, detail)
	}
	s, err := r.start(ctx, spec, "")
	if err != nil {
		return fail(err.Error())
	}
	res, err, _ := r.exchange(ctx, s, strings.NewReader(""), probeLimits, nil, nil, false)
	rep := s.egress.close()
	r.discard(s)
	if err != nil {
		return fail(err.Error())
	}
	if d := runproto.EgressCheckFailure(res, rep); d != "" {
		return fail(d)
	}
	return nil
}

// removeEgressDir removes the directory of the runs' sockets.
func (r *Runner) removeEgressDir() error {
	if r.egressDir == "" {
		return nil
	}
	return os.RemoveAll(r.egressDir)
}

// networkDetail describes the network protection of run containers.
func (r *Runner) networkDetail() string {
	d := "network mode none, in a network namespace the engine's network stack makes: only a loopback interface, no route to the host, the internet or DNS"
	if r.ownNetns {
		d = "network mode none, in a network namespace the runtime makes for the container (NetworkDisabled), with IPv6 off: only a loopback interface, no route to the host, the internet or DNS"
	}
	if r.cfg.Egress == nil {
		return d
	}
	return d + "; the one way out is codeexec's egress proxy (CODE_EXEC_NETWORK=allowlist), reached at " + egressAddr + " through a relay and a unix socket of the container's own"
}
