package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Egress in kubernetes mode (CODE_EXEC_NETWORK=allowlist): each run pod
// that has egress gets the relay of relay.go, started over pods/exec by
// start before the pod is handed a program (warm pods at fill time), and a
// session of codeexec's egress proxy served on the relay's connections.
// The run's result carries the session's report. A session's pod gets the
// same relay before each call, while no code of the session runs; the
// session's supervisor kills it at the call's end, and the server ends its
// stream before it cuts the one proxy session of the pod's life, so that
// nothing a call left on its relay reaches a later call (sessionEgress).

// relayStartTimeout bounds the relay's way to listening, once its pod runs.
const relayStartTimeout = time.Minute

// relayExec is one relay exec'd into a pod: the server's end of its stream.
type relayExec struct {
	mux    *relayMux
	stream chan struct{} // closed once the exec stream ended
	stderr boundedBuffer
}

// podEgress is one run pod's relay and proxy session.
type podEgress struct {
	*relayExec
	session *proxy.Session

	closeOnce sync.Once
	report    *egress.Report
}

// restrict narrows what the pod's program may reach to the run's own
// allowlist (sandbox.Request.Network), before the program is handed over.
func (s *podSession) restrict(a *egress.Allowlist) {
	if s.egress != nil {
		s.egress.session.Restrict(a)
	}
}

// startRelay execs the relay in the run container of s, waits until it
// listens and serves the pod's proxy session on its connections. On error
// nothing of it is left running (the caller discards the pod).
func (r *Runner) startRelay(ctx context.Context, s *podSession) (*podEgress, error) {
	x, err := r.execRelay(ctx, s.name)
	if err != nil {
		return nil, err
	}
	e := &podEgress{relayExec: x, session: r.cfg.Egress.Serve(s.name, x.mux)}
	go func() {
		select {
		case <-x.mux.done:
			// A warm pod whose relay ended is of no use: the pool
			// replaces it. (A run's relay ends with its program.)
			s.markBroken()
		case <-s.stop:
		}
	}()
	return e, nil
}

// execRelay execs the relay in the run container of the pod name and waits
// until it listens. On error nothing of it is left running.
func (r *Runner) execRelay(ctx context.Context, name string) (*relayExec, error) {
	exec, err := r.executor(name, "exec", &corev1.PodExecOptions{Container: containerName, Command: relayCommand(r.python, relayPort), Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w: the egress relay of the pod %s: %v", sandbox.ErrSandboxUnavailable, name, err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	streamCtx, stopStream := context.WithCancel(context.Background())
	x := &relayExec{mux: newRelayMux(inW), stream: make(chan struct{})}
	x.mux.onEnd = func() {
		// The relay reads the end of its stdin and exits; the stream ends.
		_ = inW.CloseWithError(io.EOF)
		_ = outR.CloseWithError(errRelayEnded)
		stopStream()
	}
	go func() {
		defer close(x.stream)
		err := exec.StreamWithContext(streamCtx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: &x.stderr})
		if err != nil {
			r.log.Debug("the egress relay's stream ended with an error", "pod", name, "err", err)
		}
		_ = outW.CloseWithError(io.EOF)
	}()
	go x.mux.serve(outR)

	t := time.NewTimer(relayStartTimeout)
	defer t.Stop()
	select {
	case <-x.mux.ready:
		return x, nil
	case <-x.mux.done:
		// What the relay said, once its stream has ended.
		select {
		case <-x.stream:
		case <-t.C:
		}
		err = fmt.Errorf("kubernetes: %w: the egress relay of the pod %s did not start: %v%s", sandbox.ErrSandboxUnavailable, name, x.mux.Err(), x.stderr.detail())
	case <-t.C:
		err = fmt.Errorf("kubernetes: %w: the egress relay of the pod %s did not listen within %s%s", sandbox.ErrSandboxUnavailable, name, relayStartTimeout, x.stderr.detail())
	case <-ctx.Done():
		err = fmt.Errorf("kubernetes: cancelled while the egress relay of the pod %s started: %w", name, ctx.Err())
	case <-r.done:
		err = fmt.Errorf("kubernetes: %w while the egress relay of the pod %s started", sandbox.ErrClosed, name)
	}
	x.mux.end(errors.New("the relay did not start"))
	return nil, err
}

// close ends the proxy session (every connection of the run) and the relay's
// stream, and returns the session's report. It is safe to call more than
// once; later calls return the same report.
func (e *podEgress) close() *egress.Report {
	e.closeOnce.Do(func() {
		if e.session != nil {
			e.report = e.session.Close()
		}
		e.mux.Close()
	})
	return e.report
}

// sessionEgress is a session pod's egress: one proxy session for the pod's
// life, cut after each call, served on the connections of the relay of the
// call that runs (the first one is started with the session, before any of
// its code runs). The next call's relay starts as a call ends, while
// nothing of the session runs (its interpreter is stopped, every other
// process of it killed), so that a call after a pause does not wait for
// it. Its methods are called with the session's lock held.
type sessionEgress struct {
	r       *Runner
	pod     string
	l       *relayListener
	session *proxy.Session
	relay   *relayExec // the relay named for the call; nil when none

	mu     sync.Mutex
	ahead  *relayAhead // the next call's relay, started as the last call ended; nil when none
	closed bool

	closeOnce sync.Once
}

// relayAhead is a relay started for a call to come.
type relayAhead struct {
	done   chan struct{} // closed once the start ended: x or err is set
	x      *relayExec
	err    error
	cancel context.CancelFunc
}

// startAhead starts the next call's relay, unless e is closed.
func (e *sessionEgress) startAhead() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.ahead != nil {
		return
	}
	ctx, cancel := context.WithCancel(e.r.doneCtx)
	a := &relayAhead{done: make(chan struct{}), cancel: cancel}
	e.ahead = a
	go func() {
		defer close(a.done)
		a.x, a.err = e.r.execRelay(ctx, e.pod)
	}()
}

// takeAhead returns the relay started ahead, once its start ended, and
// forgets it: nil when none was started, or it failed, or ctx ended first
// (the start is then stopped and what it started ended).
func (e *sessionEgress) takeAhead(ctx context.Context) *relayExec {
	e.mu.Lock()
	a := e.ahead
	e.ahead = nil
	e.mu.Unlock()
	if a == nil {
		return nil
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		a.end()
		return nil
	}
	a.cancel()
	if a.err != nil {
		e.r.log.Debug("the egress relay started ahead for a session's next call did not start; starting another", "pod", e.pod, "err", a.err)
		return nil
	}
	return a.x
}

// end stops the start and ends what it started.
func (a *relayAhead) end() {
	a.cancel()
	<-a.done
	if a.x != nil {
		a.x.mux.Close()
	}
}

func (r *Runner) newSessionEgress(pod string) *sessionEgress {
	l := newRelayListener()
	return &sessionEgress{r: r, pod: pod, l: l, session: r.cfg.Egress.Serve(pod, l)}
}

// errNoRelay is what ensure returns when no relay could be started in the
// pod: the call runs without network.
var errNoRelay = errors.New("no egress relay runs in the session's pod")

// ensure makes sure, on c (a connection to the session's supervisor, no
// call running, so nothing of the session runs), that a relay runs in the
// pod for the next call, named to the supervisor, which kills it at the
// call's end. The relay started ahead, or one started for a call that then
// did not run (no cut dropped it), is named while it runs; otherwise the
// supervisor ends the one named for good (its stream may have been cut
// while it ran) and another is started and named. Errors: one wrapping
// errNoRelay when no relay could be started; any other is c's (the
// supervisor failed, or ctx ended).
func (e *sessionEgress) ensure(ctx context.Context, c *sessions.Conn) error {
	if e.relay == nil {
		if x := e.takeAhead(ctx); x != nil {
			e.relay = x
			e.l.attach(x.mux)
		}
	}
	if e.relay != nil && e.relay.mux.Err() == nil {
		kept, err := c.NameRelay(ctx, e.relay.mux.Pid())
		if err != nil || kept {
			return err
		}
	}
	e.drop()
	if _, err := c.NameRelay(ctx, 0); err != nil {
		return err
	}
	x, err := e.r.execRelay(ctx, e.pod)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoRelay, err)
	}
	kept, err := c.NameRelay(ctx, x.mux.Pid())
	if err != nil || !kept {
		x.mux.Close()
		if err == nil {
			err = fmt.Errorf("%w: the relay of the pod %s ended as it started%s", errNoRelay, e.pod, x.stderr.detail())
		}
		return err
	}
	e.relay = x
	e.l.attach(x.mux)
	return nil
}

// drop ends the relay's stream, once the relay is gone or must not serve
// any more (its call ended, or a kill -9 -1 in the pod), and with it every
// connection of the relay, with what it sent that no one read (see
// relayMux.end): the next ensure starts another.
func (e *sessionEgress) drop() {
	if e.relay != nil {
		e.relay.mux.Close()
		e.relay = nil
	}
}

// cut ends the relay of the call that just ended (the supervisor killed it
// with the call's other processes, before the server heard of the end), so
// that nothing it accepted, and no connection still on its way to the
// proxy, is served for the next call; then it returns what the call
// reached, and closes every connection the call left (see
// proxy.Session.Cut). The next call's relay starts then.
func (e *sessionEgress) cut() *egress.Report {
	e.drop()
	rep := e.session.Cut()
	e.startAhead()
	return rep
}

// close ends the proxy session and the relay's stream (the relay reads the
// end of its stdin and exits). It is safe to call more than once.
func (e *sessionEgress) close() {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		a := e.ahead
		e.ahead = nil
		e.mu.Unlock()
		if a != nil {
			a.end()
		}
		e.session.Close()
		e.l.Close()
	})
}

// relayListener is the net.Listener of a session's proxy session: the
// connections of each relay attached in turn, as long as it runs.
type relayListener struct {
	conns chan net.Conn
	done  chan struct{}

	mu     sync.Mutex
	cur    *relayMux
	closed bool
}

var _ net.Listener = (*relayListener)(nil)

func newRelayListener() *relayListener {
	return &relayListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// attach hands the connections of m to Accept until m ends; after Close it
// ends m.
func (l *relayListener) attach(m *relayMux) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		m.Close()
		return
	}
	l.cur = m
	go func() {
		for {
			c, err := m.Accept()
			if err != nil {
				return
			}
			select {
			case l.conns <- c:
			case <-l.done:
				_ = c.Close()
				return
			}
		}
	}()
}

// Accept returns the next connection of a relay.
func (l *relayListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close ends the listener and the relay attached last. It is safe to call
// more than once.
func (l *relayListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
		if l.cur != nil {
			l.cur.Close()
		}
	}
	return nil
}

// Addr is where programs connect, in the pod.
func (l *relayListener) Addr() net.Addr { return relayNetAddr(relayAddr) }

// networkReport ends the egress of s, once its program has ended, and puts
// its report in res.
func (r *Runner) networkReport(s *podSession, res *sandbox.Result) {
	if s.egress == nil {
		return
	}
	rep := s.egress.close()
	if res != nil {
		res.Network = rep
	}
}

// egressEnv is the environment that a pod with egress adds to podEnv: the
// proxy variables, pointing at the relay.
func egressEnv() []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, kv := range egress.ProxyEnv(relayAddr) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	return env
}

// podEnvOf is the environment of spec's pod.
func podEnvOf(spec podSpec) []corev1.EnvVar {
	if !spec.egress {
		return podEnv
	}
	return append(append([]corev1.EnvVar(nil), podEnv...), egressEnv()...)
}

// checkEgress runs one pod that reaches the proxy the way runs do: an image
// without python3, or a cluster whose API server or runtime does not carry
// pods/exec streams, makes New fail here rather than every run later.
func (r *Runner) checkEgress(ctx context.Context) error {
	fail := func(detail string) error {
		return fmt.Errorf("kubernetes: %w: CODE_EXEC_NETWORK=allowlist: a pod cannot reach the egress proxy through its relay (a python3 program over pods/exec): %s", sandbox.ErrSandboxUnavailable, detail)
	}
	if r.python == "" {
		return fail("the image " + r.cfg.Image + " has no python3, which runs the relay")
	}
	spec := podSpec{
		role:     roleProbe,
		cmd:      []string{"/bin/sh", "-c", ulimits(probeLimits) + `exec "$@"`, "codeexec-egress-check", r.python, "-I", "-S", "-B", "-c", runproto.EgressCheckProgram(relayHost, relayPort)},
		limits:   containerLimits(probeLimits),
		deadline: runDeadline(time.Now(), probeLimits.Timeout),
		egress:   true,
	}
	s, err := r.start(ctx, spec)
	if err != nil {
		return fail(err.Error())
	}
	// The program reads a line first: it starts once the relay listens.
	res, err, _ := r.exchange(ctx, s, strings.NewReader("go\n"), probeLimits, nil, nil, false)
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

// egressDetail is what the network protection adds under egress.
func (r *Runner) egressDetail() string {
	if r.cfg.Egress == nil {
		return ""
	}
	return "; the one way out is codeexec's egress proxy (CODE_EXEC_NETWORK=allowlist), reached at " + relayAddr +
		" in the pod through a relay (python3, one process of the run's user, not dumpable) that carries each connection over a pods/exec stream of the pod's own: no network path from the pod to the server; a session's pod keeps its relay across calls and gets another before a call once it ended, never a way around the proxy"
}

// egressInfo is sandbox_info's network policy: nil without egress.
func (r *Runner) egressInfo() *egress.PolicyInfo {
	if r.cfg.Egress == nil {
		return nil
	}
	return r.cfg.Egress.Policy().Info(true, relayAddr)
}

// boundedBuffer keeps the first bytes written to it (a relay's stderr).
type boundedBuffer struct {
	mu sync.Mutex
	b  []byte
}

const boundedBufferMax = 4 << 10

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := boundedBufferMax - len(b.b); room > 0 {
		b.b = append(b.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// detail is what was written, as the end of a sentence ("" when nothing).
func (b *boundedBuffer) detail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := strings.TrimSpace(string(b.b)); s != "" {
		return " (it said: " + s + ")"
	}
	return ""
}
