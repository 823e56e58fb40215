// Package sessionproc is the session core that process mode (sandbox/process)
// and mode none (sandbox/host) share: a session is a persistent directory
// and, for python and javascript, one long-lived interpreter running the
// session driver under the run core (sandbox/internal/executor), exactly as
// a run of the same mode would run, with its control channel on two FIFOs
// in the session's directory. bash calls run a fresh bash in that directory.
//
// The run core is used as it is: the interpreter is one long run (its
// timeout is the session's remaining lifetime), the driver opens the FIFOs
// by path and unlinks them before any code runs.
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
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress"
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
	// Spec returns the Spec of one program of lang in dir, and what to
	// clean up after it ran. With serve set (Egress is), the program
	// reaches the network only through the egress proxy, as a run of the
	// mode does: the mode hands the listener that the program's
	// HTTP_PROXY and HTTPS_PROXY point at to serve, before the program
	// starts.
	Spec func(lang, dir, path string, args []string, stdin string, lim sandbox.Limits, serve func(net.Listener)) (executor.Spec, func(), error)
	// Egress, if set, is the proxy through which the session's programs
	// reach the network (CODE_EXEC_NETWORK=allowlist). The interpreter's
	// proxy session lives as long as the interpreter and is cut after each
	// call (proxy.Session.Cut), so that each call's Result reports what that
	// call reached, within a run's caps; a bash call has one of its own.
	Egress *proxy.Proxy
	// Owner is the host user that owns the session's directory and
	// files, when it is not the server's own.
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

// driverOutput caps what the interpreter itself writes on its own stdout
// and stderr (not a call's output, which comes in frames): diagnostics only.
const driverOutput = 64 << 10

// startTimeout bounds the start of an interpreter.
const startTimeout = 30 * time.Second

// Session is one session of process mode or mode none.
type Session struct {
	h      Host
	spec   sessions.Spec
	lang   sandbox.LanguageSpec
	interp sandbox.Interpreter
	dir    string

	mu     sync.Mutex // one call at a time, and Close
	closed bool
	live   *interpreter // nil until the first call, and after one that ended it
}

// interpreter is a running driver.
type interpreter struct {
	conn   *sessions.Conn
	cancel context.CancelFunc
	done   chan struct{} // closed when the run has ended and is cleaned up
	res    sandbox.Result
	err    error
	// egress is the interpreter's part of the egress proxy (nil without
	// one); network is its last report, once the interpreter has ended.
	egress  *egressPart
	network *egress.Report
}

// egressPart is the proxy session of one program of a session (its
// interpreter, or a bash call), once the program's listener is handed
// over. A nil *egressPart reports nothing.
type egressPart struct {
	mu sync.Mutex
	s  *proxy.Session
}

// newEgressPart returns a part for a program, and the function that the
// mode hands the program's listener to; nil ones without a proxy.
func newEgressPart(p *proxy.Proxy, id string) (*egressPart, func(net.Listener)) {
	if p == nil {
		return nil, nil
	}
	e := &egressPart{}
	return e, func(l net.Listener) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.s = p.Serve(id, l)
	}
}

// cut returns what the program reached since the last cut.
func (e *egressPart) cut() *egress.Report { return e.report(false) }

// close ends the proxy session and returns what the program reached since
// the last cut.
func (e *egressPart) close() *egress.Report { return e.report(true) }

func (e *egressPart) report(closing bool) *egress.Report {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.s == nil:
		return nil
	case closing:
		return e.s.Close()
	}
	return e.s.Cut()
}

// Start makes the session's directory; the interpreter starts with the
// first call (and again after a call that ended it).
func Start(ctx context.Context, h Host, spec sessions.Spec, lang sandbox.LanguageSpec, in sandbox.Interpreter) (*Session, error) {
	dir, err := os.MkdirTemp(h.Root, "session-")
	if err != nil {
		if h.Release != nil {
			h.Release()
		}
		return nil, fmt.Errorf("%w: creating the session directory: %v", sandbox.ErrSandboxUnavailable, err)
	}
	s := &Session{h: h, spec: spec, lang: lang, interp: in, dir: dir}
	if uid, gid, ok := h.Owner(); ok {
		if err := os.Chown(dir, uid, gid); err != nil {
			s.removeDir()
			return nil, fmt.Errorf("%w: handing the session directory to the sandbox user: %v", sandbox.ErrSandboxUnavailable, err)
		}
	}
	if sessions.Interpreted(lang.Name) {
		// Start the interpreter now, so that the first call is fast and a
		// language that cannot start fails session_create.
		if err := s.startInterpreter(ctx); err != nil {
			s.removeDir()
			return nil, err
		}
	}
	return s, nil
}

// Dir is the session's working directory.
func (s *Session) Dir() string { return s.dir }

// randomName returns a name that nobody can have prepared in advance.
func randomName(prefix, suffix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b) + suffix
}

// startInterpreter starts the driver with a fresh control channel.
func (s *Session) startInterpreter(ctx context.Context) error {
	// No process of the session runs now (the previous interpreter and its
	// processes were killed), so nothing can swap these paths between
	// their creation and the opens below; O_NOFOLLOW holds anyway.
	inPath := filepath.Join(s.dir, randomName(".codeexec-in-", ""))
	outPath := filepath.Join(s.dir, randomName(".codeexec-out-", ""))
	var files []*os.File
	fail := func(doing string, err error) error {
		for _, f := range files {
			_ = f.Close()
		}
		_ = os.Remove(inPath)
		_ = os.Remove(outPath)
		return fmt.Errorf("%w: %s: %v", sandbox.ErrSandboxUnavailable, doing, err)
	}
	for _, p := range []string{inPath, outPath} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return fail("creating the session's control channel", err)
		}
		if uid, gid, ok := s.h.Owner(); ok {
			if err := os.Lchown(p, uid, gid); err != nil {
				return fail("handing the control channel to the sandbox user", err)
			}
		}
		// O_RDWR: opening never waits for the other end, and the server's
		// end stays valid whatever the driver does.
		f, err := os.OpenFile(p, os.O_RDWR|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return fail("opening the session's control channel", err)
		}
		files = append(files, f)
	}
	args, _ := sessions.DriverArgs(s.lang.Name, inPath, outPath)
	lim := s.spec.Limits
	lim.Timeout = time.Until(s.spec.Deadline) + time.Minute
	lim.OutputBytes = driverOutput
	part, serve := newEgressPart(s.h.Egress, s.spec.ID)
	spec, cleanup, err := s.h.Spec(s.lang.Name, s.dir, s.interp.Path, append(slices.Clone(s.lang.Args), args...), "", lim, serve)
	if err != nil {
		_ = part.close()
		return fail("preparing the interpreter", err)
	}
	runCtx, end, err := s.h.Begin(context.Background())
	if err != nil {
		cleanup()
		for _, f := range files {
			_ = f.Close()
		}
		_ = part.close()
		return err
	}
	runCtx, cancel := context.WithCancel(runCtx)
	it := &interpreter{conn: sessions.NewConn(files[0], files[1]), cancel: cancel, done: make(chan struct{}), egress: part}
	go func() {
		defer close(it.done)
		defer end()
		defer cleanup()
		it.err = executor.Spawn(runCtx, spec, &it.res)
		it.network = part.close()
		// The interpreter is gone: its FIFOs can give nothing more.
		_ = it.conn.Close()
		_ = os.Remove(inPath)
		_ = os.Remove(outPath)
	}()
	sctx, scancel := context.WithTimeout(ctx, startTimeout)
	defer scancel()
	if _, err := it.conn.WaitReady(sctx); err != nil {
		it.kill()
		msg := it.res.Stderr
		if it.err != nil {
			msg = it.err.Error() + " " + msg
		}
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return fmt.Errorf("starting the %s interpreter: %w", s.lang.Name, ctx.Err())
		}
		return fmt.Errorf("%w: the %s interpreter of the session did not start (%v) %s", sandbox.ErrSandboxUnavailable, s.lang.Name, err, truncate(msg, 500))
	}
	s.live = it
	return nil
}

// kill stops the interpreter and waits until it is cleaned up.
func (it *interpreter) kill() {
	it.cancel()
	<-it.done
}

// Exec runs one call. See sessions.Session.
//
// The request's files are written into the session's directory before the
// call, never through a symbolic link; with req.Artifacts, the Result holds
// the files that the call created or changed there (those of earlier calls
// are not reported again).
func (s *Session) Exec(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("session: %w", sandbox.ErrClosed)
	}
	if sessions.Interpreted(s.lang.Name) && s.live == nil {
		if err := s.startInterpreter(ctx); err != nil {
			return nil, err
		}
	}
	// After the interpreter's start, so that its control channel, unlinked
	// by then, is never taken for a file of the call.
	before, err := s.writeFiles(req)
	if err != nil {
		return nil, err
	}
	res, err := s.call(ctx, req)
	if err == nil && req.Artifacts != nil {
		res.Artifacts = executor.CollectArtifacts(s.dir, "", before, *req.Artifacts)
	}
	return res, err
}

// writeFiles writes req's files into the session's directory, as the
// session's user, and returns the snapshot of the directory that the
// call's artifacts are found against (nothing, without req.Artifacts).
func (s *Session) writeFiles(req sandbox.Request) (artifacts.Snapshot, error) {
	var owner *executor.Owner
	if uid, gid, ok := s.h.Owner(); ok {
		owner = &executor.Owner{UID: uid, GID: gid}
	}
	written, err := executor.WriteFiles(s.dir, req.Files, owner)
	if err != nil || req.Artifacts == nil {
		return written, err
	}
	// Sizes and times of what is there, and the digests of what was just
	// written: an input the call rewrites with the same bytes is no artifact.
	snap, err := artifacts.Take(artifacts.DirSource{Dir: s.dir}, *req.Artifacts)
	if err != nil {
		return written, fmt.Errorf("%w: reading the session's directory: %v", sandbox.ErrSandboxUnavailable, err)
	}
	return snap.Add(written), nil
}

// call runs one call's program: in the live interpreter, or as a fresh
// bash.
func (s *Session) call(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if !sessions.Interpreted(s.lang.Name) {
		return s.runFresh(ctx, req)
	}
	it := s.live
	res, outcome := it.conn.Exec(ctx, req.Code, req.Stdin, req.Limits)
	res.Sandbox = s.h.Mode
	if outcome == sessions.Completed {
		res.Network = it.egress.cut()
		s.finish(res)
		return res, nil
	}
	// The call ended the interpreter, or must: its state is lost.
	s.live = nil
	it.kill()
	res.StateLost = true
	res.Network = it.network
	if outcome == sessions.Died {
		// The interpreter ended by itself: a crash, a signal, or a
		// resource limit the kernel enforced.
		res.ExitCode, res.Signal = it.res.ExitCode, it.res.Signal
		if it.err != nil && it.res.ExitCode == 0 {
			return res, fmt.Errorf("%w: the session's interpreter failed: %v", sandbox.ErrSandboxUnavailable, it.err)
		}
	} else {
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), "killed"
	}
	s.finish(res)
	if outcome == sessions.Cancelled {
		return res, fmt.Errorf("call cancelled: %w", ctx.Err())
	}
	return res, nil
}

// runFresh runs a bash call: a fresh bash in the session's directory.
func (s *Session) runFresh(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	ctx, end, err := s.h.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	file := filepath.Join(s.dir, randomName(".codeexec-call-", filepath.Ext(s.lang.FileName)))
	// O_EXCL never follows a link the session's code may have left.
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: writing the program: %v", sandbox.ErrSandboxUnavailable, err)
	}
	_, err = f.WriteString(req.Code)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	defer os.Remove(file)
	if err != nil {
		return nil, fmt.Errorf("%w: writing the program: %v", sandbox.ErrSandboxUnavailable, err)
	}
	lim := s.spec.Limits
	lim.Timeout, lim.OutputBytes = req.Limits.Timeout, req.Limits.OutputBytes
	part, serve := newEgressPart(s.h.Egress, s.spec.ID)
	spec, cleanup, err := s.h.Spec(s.lang.Name, s.dir, s.interp.Path, s.lang.ProgramArgs(file, s.spec.PackageDir != nil), req.Stdin, lim, serve)
	if err != nil {
		_ = part.close()
		return nil, err
	}
	defer cleanup()
	res := &sandbox.Result{Sandbox: s.h.Mode}
	err = executor.Spawn(ctx, spec, res)
	res.Network = part.close()
	s.finish(res)
	return res, err
}

func (s *Session) finish(res *sandbox.Result) {
	if s.h.Finish != nil {
		s.h.Finish(res)
	}
}

// Close stops the interpreter, waiting for a call in flight to be stopped
// by its caller first, and removes the session's directory.
func (s *Session) Close() error {
	// A call in flight holds mu; its interpreter is killed first so that
	// the call ends at once.
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
	return s.removeDir()
}

func (s *Session) removeDir() error {
	if s.h.Release != nil {
		s.h.Release()
	}
	if err := executor.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("removing the session directory: %w", err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
