package kube

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Sessions in kubernetes mode.
//
// A session is a pod of its own, locked down exactly like a run's (the same
// podObject: non-root uid of its own, read-only root, a memory-backed,
// size-capped /tmp that is the session's working directory, no
// capabilities, no privilege escalation, seccomp, no token, requests equal
// to limits, the RuntimeClass), labelled with the role "session", with a
// deadline (annotation and activeDeadlineSeconds) after the session's
// maximum lifetime, and the replica's labels and owner reference: a pod that
// outlives its server (killed with SIGKILL) is deleted by the next sweep of
// any replica once the dead one's Lease is stale, and by the garbage
// collector with that Lease. Its PID 1 is the session supervisor
// (sandbox/sessions, drivers/supervisor.py) after the shell that sets the
// run's ulimits: as the pod's init it reaps every orphan and no process of
// the pod can signal it; it is not dumpable, so none can read its memory or
// descriptors. It keeps the session's interpreter, and after each call stops
// it and kills every other process of the pod before it reports the call's
// end, exactly as in docker mode.
//
// Each call reaches the supervisor over pods/exec: the server runs the
// session client (sessionclient.py, in the image's python3) in the pod, and
// speaks the session protocol with the supervisor through it, on a
// connection to an abstract unix socket of the pod. Why an exec per call and
// not one stream for the session's life (docker mode's attach): a stream
// through the API server that stays open for an idle session's minutes or
// hours is cut by the API server, the kubelet (its streaming idle timeout)
// or a proxy on the way, and the session with it; an exec lives as long as
// its call. The price is one exec per call, and a channel whose client runs
// beside the session's code; what keeps it the supervisor's alone:
//   - the socket's name is bound by PID 1 before anything of the session
//     runs and held for the session's life, so no process of the session can
//     take it, and the client checks that its peer is PID 1 (SO_PEERCRED);
//   - the supervisor serves one connection at a time, accepts one only
//     between calls, and only from a process whose parent is outside the
//     pod's PID namespace (an exec; every process of the session descends
//     from the supervisor), named by a pidfd where the kernel gives one;
//   - at each call's end every process of the pod but the supervisor, the
//     stopped interpreter and the call's own client is killed (under the
//     allowlist, the call's egress relay with them, below), so a client is
//     always started while nothing of the session runs, and it makes itself not
//     dumpable before it reads anything: the session's code can neither
//     trace it, nor open its descriptors, nor write into its output;
//   - the session's code can kill the client (it runs as the same user): the
//     supervisor then stops the call as a reset does, and the server, seeing
//     the stream end before the call did, kills every process of the pod but
//     the supervisor (kill -9 -1 over pods/exec), connects again, resets and
//     reports the call as killed with its state lost (sessions.CallHooks'
//     Reconnect). It is never a result of the code's making.
//
// A call's timeout, output cap and cancellation are docker mode's: the
// server sends reset on the call's connection, and the supervisor kills
// every process of the pod but itself and starts a fresh interpreter; the
// files in /tmp stay.
//
// Under CODE_EXEC_NETWORK=allowlist the pod has the proxy variables of a
// run's, and each call a relay of run pods' (relay.go), exec'd by the
// server over a stream of its own before the call, while nothing of the
// session runs (the first before any code of the session runs). The server
// names it to the supervisor (sessions.Conn.NameRelay), which kills it at
// the call's end with the call's other processes, its listener and what is
// queued there with it; the server then ends the relay's stream, and what
// the relay sent that no one read, before it cuts the proxy session. So a
// call that stops its relay with a request queued on it, or leaves one on
// its way, has it forwarded in no later call, nor charged to one. The code
// can kill the relay, as it runs as the same user: the rest of that call
// has no network, never more; while the code holds the relay's port, no
// relay can start, and a call then runs without network and its stderr
// says so. One proxy session serves the pod's relays in turn and is cut
// after each call, so that each call's result reports its own
// destinations; it ends when the session is closed, or once a call finds
// its pod ended.

const (
	roleSession = "session"
	// controlSocket is the abstract unix socket on which a session pod's
	// supervisor listens (abstract names belong to the pod's network
	// namespace: one per pod).
	controlSocket = "codeexec-session"
	// connectAttempts bounds the execs of the session client that one
	// connection may take: a client that the supervisor refuses, or whose
	// stream ends before the greeting, is tried again while the pod runs.
	connectAttempts = 3
)

// sessionClient is the program of each call's exec (see above).
//
//go:embed sessionclient.py
var sessionClient string

// Sessions returns the session backend of this Runner. Its sessions are
// pods this Runner tracks: Close deletes them with the rest, and the sweep
// of any replica deletes them once this one's Lease is stale.
func (r *Runner) Sessions() sessions.Backend { return sessionBackend{r} }

type sessionBackend struct{ r *Runner }

var _ sessions.Backend = sessionBackend{}

// sessionPod is one session's pod.
type sessionPod struct {
	r     *Runner
	name  string
	lang  string
	state *podState

	mu     sync.Mutex
	closed bool
	// known is what the previous call's artifacts were found with, to
	// find the next call's against.
	known artifacts.Snapshot
	ooms  int // the pod's OOM kills seen so far
	// egress is the pod's relay and proxy session, under the allowlist.
	egress *sessionEgress
}

// Start creates the session's pod and waits until its supervisor greets a
// first connection (its interpreter is loaded). See sessions.Backend.
func (b sessionBackend) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	r := b.r
	lang, err := runproto.CheckLanguage("kubernetes", spec.Language, r.cfg.Languages, r.interps, r.caps, r.cfg.Image)
	if err != nil {
		return nil, err
	}
	if spec.PackageDir != nil {
		return nil, fmt.Errorf("kubernetes: %w: packages are not available in kubernetes mode yet", sandbox.ErrSandboxUnavailable)
	}
	in := r.interps[lang]
	python := r.python
	if lang == "python" {
		python = in.Path
	}
	if python == "" || r.python == "" {
		return nil, fmt.Errorf("kubernetes: %w: sessions need python3 in the image %s (it runs each session's supervisor and the client of each call)", sandbox.ErrLanguageUnavailable, r.cfg.Image)
	}
	if err := r.beginRun(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	lim := containerLimits(spec.Limits)
	interp := append([]string{in.Path}, slices.Clone(sandbox.Languages[lang].Args)...)
	listen := "listen:" + controlSocket
	cmd := append([]string{"/bin/sh", "-c", ulimits(lim) + `exec "$@"`, "codeexec-session", python},
		sessions.SupervisorArgs(lang, listen, listen, interp)...)
	name, st, err := r.createPod(ctx, podSpec{role: roleSession, lang: lang, cmd: cmd, limits: lim, deadline: spec.Deadline.Add(leftoverGrace), egress: r.cfg.Egress != nil})
	if err != nil {
		return nil, err
	}
	s := &sessionPod{r: r, name: name, lang: lang, state: st}
	if r.cfg.Egress != nil {
		s.egress = r.newSessionEgress(name)
		// Before anything of the session runs: every call reaches only
		// what the session's own allowlist allows.
		s.egress.session.Restrict(spec.Network)
	}
	// Under the allowlist, the relay runs and the supervisor keeps it
	// before anything of the session runs.
	c, _, err := s.open(ctx, true)
	if err != nil {
		s.remove()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("kubernetes: starting the %s session: %w", lang, cerr)
		}
		return nil, fmt.Errorf("kubernetes: %w: the %s session did not start: %v", sandbox.ErrSandboxUnavailable, lang, err)
	}
	c.close()
	r.log.Debug("session pod started", "pod", name, "session", spec.ID, "language", lang)
	return s, nil
}

// Exec runs one call over an exec of its own. See sessions.Session.
func (s *sessionPod) Exec(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("kubernetes: session: %w", sandbox.ErrClosed)
	}
	if err := s.r.beginRun(); err != nil {
		return nil, err
	}
	defer s.r.runs.Done()
	if err := s.ended(); err != nil {
		return nil, err
	}
	// Close (of the Runner) stops the call too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.r.doneCtx, cancel)()
	c, noNetwork, err := s.open(ctx, false)
	switch {
	case err != nil && isClosed(s.r.done):
		return nil, fmt.Errorf("kubernetes: %w before the call started", sandbox.ErrClosed)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("kubernetes: call cancelled before it started: %w", ctx.Err())
	case err != nil:
		return nil, err
	}
	defer func() { c.close() }()
	res, err := sessions.Call(ctx, c.Conn, req, sessions.CallHooks{
		Mode: sandbox.ModeKubernetes,
		Reset: func() error {
			rctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			return c.Reset(rctx)
		},
		Reconnect: func() (*sessions.Conn, error) {
			nc, err := s.recover(c)
			if err != nil {
				return nil, err
			}
			c = nc
			return c.Conn, nil
		},
		OOM: func(res *sandbox.Result, ooms int) {
			// The pod's own count, as its supervisor read it; without
			// one (a call whose end the server did not hear) no kill is
			// taken for the memory limit's.
			if ooms >= 0 {
				res.OOMKilled = ooms > s.ooms && res.ExitCode != 0
				s.ooms = max(s.ooms, ooms)
			}
		},
		Network: func(res *sandbox.Result) {
			if s.egress == nil {
				return
			}
			// What this call reached, and no connection of it beyond it.
			res.Network = s.egress.cut()
			if noNetwork != "" {
				res.Stderr = noNetwork + res.Stderr
			}
		},
		Known: &s.known,
	})
	if err != nil && ctx.Err() != nil && isClosed(s.r.done) {
		return res, fmt.Errorf("kubernetes: %w while the call was in flight", sandbox.ErrClosed)
	}
	if err != nil {
		return res, fmt.Errorf("kubernetes: %w", err)
	}
	return res, nil
}

// open connects to the session's supervisor (connect) and, under the
// allowlist, makes sure that the pod's relay runs and is kept
// (sessionEgress.ensure) before the call. A relay that cannot be started
// fails the session's start (starting); for a call, it leaves the call
// without network, never with more: noNetwork then says so, as the start of
// the call's stderr.
func (s *sessionPod) open(ctx context.Context, starting bool) (c *control, noNetwork string, err error) {
	if c, err = s.connect(ctx); err != nil || s.egress == nil {
		return c, "", err
	}
	err = s.egress.ensure(ctx, c.Conn)
	switch {
	case err == nil:
		return c, "", nil
	case errors.Is(err, errNoRelay) && !starting && ctx.Err() == nil:
		s.r.log.Warn("the egress relay of a session's pod could not be started again: the call has no network", "pod", s.name, "err", err)
		return c, "codeexec: the egress relay could not be started again in the session's pod: this call has no network\n", nil
	}
	c.close()
	if !errors.Is(err, errNoRelay) && ctx.Err() == nil {
		err = fmt.Errorf("kubernetes: %w: the supervisor of the session's pod %s did not answer about its egress relay (%v)", sandbox.ErrSandboxUnavailable, s.name, err)
	}
	return nil, "", err
}

// recover mends a session whose call lost its connection old, or could not
// be reset on it: every process of the pod but its supervisor is killed (the
// call's code, the interpreter, a client that no longer answers), old is
// closed, a new connection is made, and the session is reset on it.
func (s *sessionPod) recover(old *control) (*control, error) {
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	if err := s.ended(); err != nil {
		old.close()
		return nil, err
	}
	if err := s.r.execKill(ctx, s.name); err != nil {
		s.r.log.Debug("kill -9 -1 in a session's pod failed", "pod", s.name, "err", err)
	}
	if s.egress != nil {
		// The relay went with the rest: the next call starts another.
		s.egress.drop()
	}
	old.close()
	c, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.Reset(ctx); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// Close kills every process of the session's pod but its supervisor, and
// deletes the pod. A call in flight is stopped by its caller (the Manager
// cancels it first).
func (s *sessionPod) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.egress != nil {
		// First, so that the relay ends with its stream.
		s.egress.close()
	}
	if s.ended() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		if err := s.r.execKill(ctx, s.name); err != nil {
			s.r.log.Debug("kill -9 -1 in a session's pod failed; its deletion kills it", "pod", s.name, "err", err)
		}
		cancel()
	}
	s.remove()
	return nil
}

// remove deletes the pod and stops following it; its egress ends.
func (s *sessionPod) remove() {
	if s.egress != nil {
		s.egress.close()
	}
	s.r.deletePod(s.name)
	s.r.watch.forget(s.name, s.state)
}

// ended says, as an error for the caller, that the session's pod is gone or
// its container has ended; nil while it runs. Once it has, the pod's egress
// is ended too.
func (s *sessionPod) ended() (err error) {
	defer func() {
		if err != nil && s.egress != nil {
			s.egress.close()
		}
	}()
	pod, gone, _ := s.state.now()
	if gone {
		return fmt.Errorf("kubernetes: %w: the session's pod %s was deleted from outside; close the session and create another", sandbox.ErrSandboxUnavailable, s.name)
	}
	if t := terminated(pod); t != nil {
		return fmt.Errorf("kubernetes: %w: the session's pod %s has ended (%s, exit status %d); close the session and create another", sandbox.ErrSandboxUnavailable, s.name, t.Reason, t.ExitCode)
	}
	return nil
}

// control is one exec of the session client into a session's pod: a
// connection to its supervisor, which greeted it.
type control struct {
	*sessions.Conn
	stdin      io.Closer // the exec's stdin
	stopStream context.CancelFunc
	done       chan struct{} // closed once the exec's stream ended
	stderr     bytes.Buffer  // the client's own messages; read once done is closed
	closeOnce  sync.Once
}

// connect makes a connection to the session's supervisor, within ctx (and
// apiTimeout per attempt): an exec of the client, greeted by the supervisor.
// An attempt that the supervisor refuses, or whose stream ends before the
// greeting, is made again while the pod runs, connectAttempts times in all.
func (s *sessionPod) connect(ctx context.Context) (*control, error) {
	var last error
	for range connectAttempts {
		if err := s.ended(); err != nil {
			return nil, err
		}
		c, err := s.dial(ctx)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		last = err
	}
	return nil, fmt.Errorf("kubernetes: %w: the supervisor of the session's pod %s could not be reached over pods/exec (%v)", sandbox.ErrSandboxUnavailable, s.name, last)
}

// dial makes one attempt of connect.
func (s *sessionPod) dial(ctx context.Context) (*control, error) {
	exec, err := s.r.executor(s.name, "exec", &corev1.PodExecOptions{
		Container: containerName,
		Command:   []string{s.r.python, "-I", "-S", "-B", "-c", sessionClient, controlSocket},
		Stdin:     true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	// The stream has a context of its own: a cancelled call still resets
	// the session on it, and a connection ends by its stdin's end.
	sctx, stop := context.WithCancel(context.Background())
	c := &control{stdin: inW, stopStream: stop, done: make(chan struct{})}
	go func() {
		err := exec.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: &c.stderr})
		_ = outW.CloseWithError(err) // the Conn's reader ends
		_ = inR.CloseWithError(io.ErrClosedPipe)
		close(c.done)
	}()
	c.Conn = sessions.NewConn(inW, outR)
	wctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if _, err := c.WaitReady(wctx); err != nil {
		c.close()
		if msg := strings.TrimSpace(c.stderr.String()); msg != "" {
			err = fmt.Errorf("%v: %s", err, msg)
		}
		return nil, err
	}
	return c, nil
}

// close ends the connection: its stdin ends, so the client tells the
// supervisor it is done and exits once the supervisor has ended the
// connection; the stream is given cleanupTimeout to end, and is then cut.
// It is safe to call twice.
func (c *control) close() {
	c.closeOnce.Do(func() {
		_ = c.stdin.Close()
		t := time.NewTimer(cleanupTimeout)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
		}
		c.stopStream()
		<-c.done
		_ = c.Conn.Close()
	})
}
