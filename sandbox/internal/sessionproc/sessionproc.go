// Package sessionproc is the session core that process mode (sandbox/process)
// and mode none (sandbox/host) share: a session is one long run of the
// session supervisor (sandbox/sessions, drivers/supervisor.py) under the run
// core (sandbox/internal/executor), exactly as a run of the same mode would
// run, in a working directory of its own, with its control channel on two
// FIFOs in a folder that the run reaches (bound into its root where it has
// one). The supervisor runs the session's interpreter or each bash call, and
// writes each call's files and sends what each call changed: in process
// mode with a mount namespace the working directory is the run's own capped
// tmpfs (as a run's is), which only the run sees.
//
// The run core is used as it is: the supervisor is one long run (its
// timeout is the session's remaining lifetime), which opens the FIFOs by
// path and unlinks them before anything of the session runs.
package sessionproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Host is what a mode gives the session core.
type Host struct {
	// Mode is reported in every Result.
	Mode sandbox.Mode
	// Root is the work root where session directories are made.
	Root string
	// Begin registers a run with the mode's run group (so that closing
	// the Runner stops the session); see executor.RunGroup.Begin.
	Begin func(ctx context.Context) (context.Context, func(), error)
	// Spec returns the Spec of program p (as the mode makes a run's, with
	// the command as the mode would run p.Lang's programs) and what to
	// clean up after it ran. p.Dir is the working directory, whose files
	// the program keeps for its whole life; the program must be able to
	// open the FIFOs in ctl. With p.Serve set (Egress is), the program
	// reaches the network only through the egress proxy, as a run of the
	// mode does.
	Spec func(p executor.Program, ctl string) (executor.Spec, func(), error)
	// Python returns the python3 that runs the supervisor of a session
	// whose language is not python (a python session's own python runs
	// it).
	Python func(ctx context.Context) (string, error)
	// Egress, if set, is the proxy through which the session's programs
	// reach the network (CODE_EXEC_NETWORK=allowlist). The session's proxy
	// session lives as long as its supervisor and is cut after each call
	// (proxy.Session.Cut), so that each call's Result reports what that
	// call reached, within a run's caps.
	Egress *proxy.Proxy
	// Owner is the host user that owns the session's folders, when it is
	// not the server's own.
	Owner func() (uid, gid int, ok bool)
	// Finish, if set, completes the Result of each call (an OOM kill the
	// mode saw, for example).
	Finish func(res *sandbox.Result)
	// Release, if set, is called once the session is closed and its
	// processes are gone (or it failed to start), to give back what the
	// mode held for it.
	Release func()
	Log     *slog.Logger
}

// Python returns a Host.Python: the python3 that runs find (interp), or else
// the first python3 on searchPath ("": the server's PATH).
func Python(interp map[string]sandbox.Interpreter, searchPath string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		if in, ok := interp["python"]; ok {
			return in.Path, nil
		}
		found, _ := sandbox.ResolveInterpreters(ctx, []string{"python"}, searchPath)
		if in, ok := found["python"]; ok {
			return in.Path, nil
		}
		return "", fmt.Errorf("%w: sessions need python3 on this host (it runs each session's supervisor)", sandbox.ErrLanguageUnavailable)
	}
}

// supervisorOutput caps what the supervisor and the interpreter write on
// their own stdout and stderr (not a call's output, which comes in frames):
// diagnostics only.
const supervisorOutput = 64 << 10

// startTimeout bounds the start of a supervisor and its interpreter.
const startTimeout = 30 * time.Second

// resetTimeout bounds how long a supervisor may take to reset.
const resetTimeout = 30 * time.Second

// Session is one session of process mode or mode none.
type Session struct {
	h      Host
	spec   sessions.Spec
	lang   sandbox.LanguageSpec
	interp sandbox.Interpreter
	dir    string // the working directory
	ctl    string // the folder of the control FIFOs

	mu     sync.Mutex // one call at a time, and Close
	closed bool
	live   *supervisor
	known  artifacts.Snapshot
}

// supervisor is a running session supervisor.
type supervisor struct {
	conn   *sessions.Conn
	cancel context.CancelFunc
	done   chan struct{} // closed when the run has ended and is cleaned up
	res    sandbox.Result
	err    error
	// egress is the session's part of the egress proxy (nil without one).
	egress *proxy.Part
}

// Start makes the session's folders and starts its supervisor, so that a
// language that cannot start fails session_create.
func Start(ctx context.Context, h Host, spec sessions.Spec, lang sandbox.LanguageSpec, in sandbox.Interpreter) (*Session, error) {
	s := &Session{h: h, spec: spec, lang: lang, interp: in}
	fail := func(doing string, err error) (*Session, error) {
		_ = s.removeDirs()
		return nil, fmt.Errorf("%w: %s: %v", sandbox.ErrSandboxUnavailable, doing, err)
	}
	var err error
	if s.dir, err = os.MkdirTemp(h.Root, "session-"); err != nil {
		return fail("creating the session directory", err)
	}
	if s.ctl, err = os.MkdirTemp(h.Root, "session-ctl-"); err != nil {
		return fail("creating the session's control folder", err)
	}
	if uid, gid, ok := h.Owner(); ok {
		for _, d := range []string{s.dir, s.ctl} {
			if err := os.Chown(d, uid, gid); err != nil {
				return fail("handing the session's folders to the sandbox user", err)
			}
		}
	}
	if err := s.startSupervisor(ctx); err != nil {
		_ = s.removeDirs()
		return nil, err
	}
	return s, nil
}

// randomName returns a name that nobody can have prepared in advance.
func randomName(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// startSupervisor starts the supervisor with a fresh control channel.
func (s *Session) startSupervisor(ctx context.Context) error {
	ch, err := s.openControl()
	if err != nil {
		return err
	}
	part, serve := proxy.NewPart(s.h.Egress, s.spec.ID, s.spec.Network)
	spec, cleanup, err := s.supervisorSpec(ctx, ch, serve)
	if err != nil {
		_ = part.Close()
		return ch.fail("preparing the session's supervisor", err)
	}
	runCtx, end, err := s.h.Begin(context.Background())
	if err != nil {
		cleanup()
		ch.closeFiles()
		_ = part.Close()
		return err
	}
	runCtx, cancel := context.WithCancel(runCtx)
	sv := &supervisor{conn: sessions.NewConn(ch.files[0], ch.files[1]), cancel: cancel, done: make(chan struct{}), egress: part}
	go func() {
		defer close(sv.done)
		defer end()
		defer cleanup()
		sv.err = executor.Spawn(runCtx, spec, &sv.res)
		_ = part.Close()
		// The supervisor is gone: its FIFOs can give nothing more.
		_ = sv.conn.Close()
		ch.remove()
	}()
	if err := s.waitReady(ctx, sv); err != nil {
		return err
	}
	s.live = sv
	return nil
}

// controlChannel is the control channel of a session's supervisor: two
// FIFOs in the session's control folder, opened by the server.
type controlChannel struct {
	in, out string
	files   []*os.File // the server's ends: in, then out
}

// closeFiles closes the server's ends of the channel.
func (ch *controlChannel) closeFiles() {
	for _, f := range ch.files {
		_ = f.Close()
	}
}

// remove removes the channel's FIFOs.
func (ch *controlChannel) remove() {
	_ = os.Remove(ch.in)
	_ = os.Remove(ch.out)
}

// fail closes and removes the channel, and returns the error of doing.
func (ch *controlChannel) fail(doing string, err error) error {
	ch.closeFiles()
	ch.remove()
	return fmt.Errorf("%w: %s: %v", sandbox.ErrSandboxUnavailable, doing, err)
}

// supervisorSpec is the Spec of the session's supervisor on control
// channel ch, and what to clean up after it ran: the mode's Spec of the
// session's program (serve as Program.Serve), for the session's lifetime.
// A python session's own python runs the supervisor (the mode may give
// another one: the data-science python); for another language a python3
// runs it, and it runs the program the mode would run.
func (s *Session) supervisorSpec(ctx context.Context, ch *controlChannel, serve func(net.Listener)) (executor.Spec, func(), error) {
	lim := s.spec.Limits
	lim.Timeout = time.Until(s.spec.Deadline) + time.Minute
	lim.OutputBytes = supervisorOutput
	p := executor.Program{Lang: s.lang.Name, Dir: s.dir, Path: s.interp.Path, Packages: s.spec.PackageDir, Limits: lim, Serve: serve}
	if s.lang.Name == "python" {
		p.Args = sessions.SupervisorArgs("python", ch.in, ch.out, nil)
		return s.h.Spec(p, s.ctl)
	}
	python, err := s.h.Python(ctx)
	if err != nil {
		return executor.Spec{}, func() {}, err
	}
	p.Args = slices.Clone(s.lang.Args)
	spec, cleanup, err := s.h.Spec(p, s.ctl)
	spec.Args = sessions.SupervisorArgs(s.lang.Name, ch.in, ch.out, append([]string{spec.Path}, spec.Args...))
	spec.Path = python
	return spec, cleanup, err
}

// waitReady waits until the supervisor sv says it is ready, or kills it
// and says why it did not start.
func (s *Session) waitReady(ctx context.Context, sv *supervisor) error {
	sctx, scancel := context.WithTimeout(ctx, startTimeout)
	defer scancel()
	_, err := sv.conn.WaitReady(sctx)
	if err == nil {
		return nil
	}
	sv.kill()
	msg := sv.res.Stderr
	if sv.err != nil {
		msg = sv.err.Error() + " " + msg
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return fmt.Errorf("starting the %s session: %w", s.lang.Name, ctx.Err())
	}
	return fmt.Errorf("%w: the %s session did not start (%v) %s", sandbox.ErrSandboxUnavailable, s.lang.Name, err, truncate(msg, 500))
}

// kill stops the supervisor's run and waits until it is cleaned up.
func (sv *supervisor) kill() {
	sv.cancel()
	<-sv.done
}

// Exec runs one call. See sessions.Session and sessions.Call: the request's
// files are written into the session's working directory, never through a
// link; with req.Artifacts, the Result holds the files that the call created
// or changed there (those of earlier calls are not reported again).
func (s *Session) Exec(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("session: %w", sandbox.ErrClosed)
	}
	sv := s.live
	if sv == nil || sv.conn.Err() != nil {
		return nil, fmt.Errorf("%w: the session's sandbox has ended (its supervisor was killed, for example by kill -9 -1 in a call, or its lifetime ran out); close the session and create another", sandbox.ErrSandboxUnavailable)
	}
	res, err := sessions.Call(ctx, sv.conn, req, sessions.CallHooks{
		Mode: s.h.Mode,
		Reset: func() error {
			rctx, cancel := context.WithTimeout(context.Background(), resetTimeout)
			defer cancel()
			return sv.conn.Reset(rctx)
		},
		OOM: func(res *sandbox.Result, _ int) {
			if s.h.Finish != nil {
				s.h.Finish(res)
			}
		},
		Network: func(res *sandbox.Result) { res.Network = sv.egress.Cut() },
		Known:   &s.known,
	})
	if err != nil && errors.Is(err, sandbox.ErrSandboxUnavailable) {
		// The supervisor failed: its sandbox goes.
		sv.kill()
	}
	return res, err
}

// Close stops the supervisor and everything of the session, waiting for a
// call in flight to be stopped by its caller first, and removes the
// session's folders.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.live != nil {
		s.live.kill()
		s.live = nil
	}
	return s.removeDirs()
}

func (s *Session) removeDirs() error {
	if s.h.Release != nil {
		s.h.Release()
	}
	var errs []error
	for _, d := range []string{s.dir, s.ctl} {
		if d == "" {
			continue
		}
		if err := executor.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing the session's folder: %w", err))
		}
	}
	return errors.Join(errs...)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
