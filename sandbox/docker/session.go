package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Sessions in docker mode.
//
// A session is a container of its own, locked down exactly like a run's
// (the same hostConfig: no network, read-only root, a size-capped /tmp,
// non-root, no capabilities, no-new-privileges, memory, CPU, pids and file
// limits), labelled with the role "session" and a deadline after the
// session's maximum lifetime. Its PID 1 is a keeper that only waits for
// its stdin to end: the server keeps the container's attach stream open, so
// a server that dies takes its session containers down with it (StdinOnce),
// and the next codeexec that starts removes them (their owner is dead).
//
// The session's work goes on in processes exec'd into the container, as its
// user, with its environment, in /tmp (the session's working directory):
//   - python and javascript: one long-lived driver (sandbox/sessions),
//     whose control channel is the exec's attached stdin and stdout. A call
//     that times out or overflows the output cap kills every process of the
//     container but the keeper (kill -9 -1 from another exec), and the next
//     call starts a fresh driver; the files in /tmp stay.
//   - bash: each call is a fresh exec of the run supervisor and a bootstrap
//     that reads the program (kept in /dev/shm, not in the working
//     directory), so that each call ends, as a run does, with every process
//     it started killed.
//
// A call's files are written into /tmp, and the files it created or changed
// there come back as its artifacts, through a helper process of the session
// (see session_files.go).

const (
	roleSession = "session"
	// keeperScript is PID 1 of a session container: it waits for the end
	// of its stdin (the server's attach stream).
	keeperScript = "read -r _ || true"
	// killAllScript, exec'd into a session container, kills every process
	// in it but PID 1 (the keeper) and itself.
	killAllScript = "kill -9 -1 2>/dev/null; exit 0"
	// driverWrapper puts a driver's control channel on fds 3 and 4 and
	// points its stdin and stdout at /dev/null.
	driverWrapper = `exec "$@" 3<&0 4>&1 </dev/null >/dev/null`
	// driverDiagnostics caps what a driver writes on its own stderr.
	driverDiagnostics = 64 << 10
	// sessionBashBootstrap is the bootstrap of a bash call: as the run's
	// (shellBootstrap), with the program in /dev/shm.
	sessionBashBootstrap = `printf '\026'
IFS=' ' read -r n lang _ || { echo "codeexec: no program received" >&2; exit 125; }
case "$n" in ''|*[!0-9]*) echo "codeexec: bad program header" >&2; exit 125;; esac
f=/dev/shm/codeexec-call.sh
head -c "$n" > "$f" || exit 125
printf '\006'
exec "$@" "$f"
`
)

// Sessions returns the session backend of this Runner. Its sessions are
// containers this Runner tracks: Close removes them with the rest.
func (r *Runner) Sessions() sessions.Backend { return sessionBackend{r} }

type sessionBackend struct{ r *Runner }

var _ sessions.Backend = sessionBackend{}

// containerSession is one session's container.
type containerSession struct {
	r    *Runner
	spec sessions.Spec
	c    *session // the container, with the keeper's attach stream

	mu     sync.Mutex
	closed bool
	live   *driverExec
	// filesHelper writes a call's files and finds its artifacts (see
	// session_files.go); nil until needed, and after it failed.
	filesHelper *helperExec
	// known is what the previous call's artifacts were found with, to
	// find the next call's against (see collectChanges).
	known artifacts.Snapshot
	// relayDown: the egress relay was killed with the rest (killAll).
	relayDown bool
}

// driverExec is a running driver.
type driverExec struct {
	id   string
	att  client.HijackedResponse
	conn *sessions.Conn
	diag *limitedBuffer
	done chan struct{} // closed when the exec's output has ended
}

func (b sessionBackend) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	r := b.r
	lang := spec.Language
	if !slices.Contains(r.cfg.Languages, lang) {
		return nil, fmt.Errorf("docker: %w: %s is disabled by CODE_EXEC_LANGUAGES", sandbox.ErrLanguageUnavailable, lang)
	}
	if _, ok := r.interps[lang]; !ok {
		st, _ := r.caps.Language(lang)
		return nil, fmt.Errorf("docker: %w: %s cannot run in the image %s: %s", sandbox.ErrLanguageUnavailable, lang, r.cfg.Image, st.Reason)
	}
	if err := r.beginRun(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	keeper := keeperScript
	if r.cfg.Egress != nil {
		// As in a run container: the relay to the egress proxy listens
		// before anything else starts.
		keeper = relayLaunch(r.relayPython) + keeper
	}
	c, err := r.start(ctx, containerSpec{
		role:     roleSession,
		cmd:      []string{"/bin/sh", "-c", keeper},
		limits:   containerLimits(spec.Limits),
		deadline: spec.Deadline.Add(leftoverGrace),
		packages: spec.PackageDir,
		lang:     lang,
		egress:   r.cfg.Egress != nil,
	}, lang)
	if err != nil {
		return nil, err
	}
	s := &containerSession{r: r, spec: spec, c: c}
	if sessions.Interpreted(lang) {
		if err := s.startDriver(ctx); err != nil {
			r.discard(c)
			return nil, err
		}
	}
	// The files helper starts now too, so that the first call does not
	// wait for its exec.
	if _, err := s.helper(ctx); err != nil {
		if s.live != nil {
			s.killAll(s.live)
		}
		r.discard(c)
		return nil, err
	}
	r.log.Debug("session container started", "id", shortID(c.id), "session", spec.ID, "language", lang)
	return s, nil
}

// execIn creates and attaches an exec of cmd in the session's container.
func (s *containerSession) execIn(ctx context.Context, cmd []string) (string, client.HijackedResponse, error) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	defer cancel()
	created, err := s.r.cli.ExecCreate(opCtx, s.c.id, client.ExecCreateOptions{
		User: s.r.user, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Env: containerEnv, WorkingDir: "/tmp", Cmd: cmd,
	})
	if err != nil {
		return "", client.HijackedResponse{}, engineErr("starting a process in the session's container", err)
	}
	att, err := s.r.cli.ExecAttach(opCtx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", client.HijackedResponse{}, engineErr("attaching to a process in the session's container", err)
	}
	return created.ID, att.HijackedResponse, nil
}

// startDriver execs the language's driver and waits until it is ready.
func (s *containerSession) startDriver(ctx context.Context) error {
	lang := s.spec.Language
	in := s.r.interps[lang]
	args, _ := sessions.DriverArgs(lang, "fd:3", "fd:4")
	cmd := append([]string{"/bin/sh", "-c", driverWrapper, "codeexec-driver", in.Path}, sandbox.Languages[lang].RunArgs(s.spec.PackageDir != nil)...)
	id, att, err := s.execIn(ctx, append(cmd, args...))
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	d := &driverExec{id: id, att: att, diag: &limitedBuffer{max: driverDiagnostics}, done: make(chan struct{})}
	d.conn = sessions.NewConn(att.Conn, pr)
	go func() {
		_, err := stdcopy.StdCopy(pw, d.diag, att.Reader)
		_ = pw.CloseWithError(err)
		close(d.done)
	}()
	sctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	if _, err := d.conn.WaitReady(sctx); err != nil {
		s.killAll(d)
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("docker: starting the %s interpreter of the session: %w", lang, cerr)
		}
		return fmt.Errorf("docker: %w: the %s interpreter of the session did not start (%v) %s", sandbox.ErrSandboxUnavailable, lang, err, strings.TrimSpace(d.diag.String()))
	}
	s.live = d
	return nil
}

// killAll kills every process of the session's container but its keeper,
// and waits for driver d (if any) to be gone. The egress relay goes too:
// the next call starts it again.
func (s *containerSession) killAll(d *driverExec) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	s.relayDown = s.c.egress != nil
	if _, att, err := s.execIn(ctx, []string{"/bin/sh", "-c", killAllScript}); err != nil {
		s.r.log.Warn("could not stop the processes of a session", "id", shortID(s.c.id), "err", err)
	} else {
		_, _ = io.Copy(io.Discard, att.Reader)
		att.Close()
	}
	if d == nil {
		return
	}
	select {
	case <-d.done:
	case <-ctx.Done():
		s.r.log.Warn("a session's interpreter did not end after SIGKILL", "id", shortID(s.c.id))
	}
	_ = d.conn.Close()
	d.att.Close()
}

// Exec runs one call. See sessions.Session.
func (s *containerSession) Exec(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("docker: session: %w", sandbox.ErrClosed)
	}
	if err := s.r.beginRun(); err != nil {
		return nil, err
	}
	defer s.r.runs.Done()
	if s.c.broken() {
		return nil, fmt.Errorf("docker: %w: the session's container %s has stopped (for example by a restart of the Docker Engine); close the session and create another", sandbox.ErrSandboxUnavailable, shortID(s.c.id))
	}
	if err := s.writeFiles(ctx, req.Files); err != nil {
		return nil, err
	}
	if s.relayDown {
		s.relaunchRelay(ctx)
	}
	res, err := s.call(ctx, req)
	if res != nil && s.c.egress != nil {
		// What this call reached, and no connection of it beyond it.
		res.Network = s.c.egress.session.Cut()
	}
	if err == nil && req.Artifacts != nil {
		// The files written now are compared by content, as a run's are.
		res.Artifacts, s.known = s.collectChanges(s.known.Add(artifacts.SnapshotOf(req.Files)), *req.Artifacts)
	}
	return res, err
}

// call runs one call's program, in the live driver or as a fresh bash.
func (s *containerSession) call(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if !sessions.Interpreted(s.spec.Language) {
		return s.execFresh(ctx, req)
	}
	if s.live == nil {
		if err := s.startDriver(ctx); err != nil {
			return nil, err
		}
	}
	d := s.live
	// Close (of the Runner) stops the call too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.r.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, outcome := d.conn.Exec(ctx, req.Code, req.Stdin, req.Limits)
	res.Sandbox = sandbox.ModeDocker
	if outcome == sessions.Completed {
		return res, nil
	}
	s.live = nil
	res.StateLost = true
	if outcome == sessions.Died {
		// The driver ended by itself: read how.
		select {
		case <-d.done:
		case <-time.After(drainTimeout):
		}
		res.ExitCode, res.Signal = s.driverExit(d)
		// Nothing in the container but the program can SIGKILL the
		// driver, except the kernel's OOM killer at the memory limit.
		res.OOMKilled = res.ExitCode == 137
	} else {
		res.ExitCode, res.Signal = 137, "killed"
	}
	s.killAll(d)
	if outcome == sessions.Cancelled {
		if ctx.Err() != nil && s.r.isClosed() {
			return res, fmt.Errorf("docker: %w while the call was in flight", sandbox.ErrClosed)
		}
		return res, fmt.Errorf("docker: call cancelled: %w", ctx.Err())
	}
	return res, nil
}

// relaunchRelay starts the egress relay again after killAll, and waits
// until it listens (or failed: the calls then have no network, which
// their reports show). A relay still running makes the new one fail to
// listen, harmlessly.
func (s *containerSession) relaunchRelay(ctx context.Context) {
	s.relayDown = false
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	_, att, err := s.execIn(ctx, []string{"/bin/sh", "-c", relayLaunch(s.r.relayPython)})
	if err != nil {
		s.r.log.Warn("could not start a session's egress relay again", "id", shortID(s.c.id), "err", err)
		return
	}
	defer att.Close()
	_ = att.CloseWrite()
	stop := context.AfterFunc(ctx, func() { att.Close() })
	defer stop()
	_, _ = io.Copy(io.Discard, att.Reader)
}

// driverExit reads the exit status of a driver that ended.
func (s *containerSession) driverExit(d *driverExec) (int, string) {
	code, _ := s.r.execExit(d.id)
	if code > 128 {
		return code, "killed"
	}
	return code, ""
}

// execExit waits, within cleanupTimeout, for the engine to report the exec
// id ended, and returns its exit code; -1 and false when it cannot tell.
func (r *Runner) execExit(id string) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for ctx.Err() == nil {
		in, err := r.cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
		if err != nil {
			break
		}
		if !in.Running {
			return in.ExitCode, true
		}
		time.Sleep(time.Millisecond)
	}
	return -1, false
}

// execFresh runs a bash call: a fresh exec of the run supervisor with the
// session bootstrap. As for a run (see bootstrap.go), the call ends when the
// exec's stream has ended and the engine says the supervisor exited 0, and
// its trailer, the last line of stderr, gives the exit status.
func (s *containerSession) execFresh(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	lang := s.spec.Language
	nonce := trailerTag + newNonce()
	in := s.r.interps[lang]
	child := append([]string{"/bin/sh", "-c", sessionBashBootstrap, "codeexec-bootstrap", in.Path}, sandbox.Languages[lang].RunArgs(s.spec.PackageDir != nil)...)
	// "-": no program file to leave out, and no archive of the working
	// directory (a session's files stay where they are).
	cmd := append([]string{"/bin/sh", "-c", supervisorScript, "codeexec-supervisor", "-"}, child...)
	id, att, err := s.execIn(ctx, cmd)
	if err != nil {
		return nil, err
	}
	defer att.Close()

	overflow := make(chan struct{})
	var once sync.Once
	out := sandbox.NewOutput(req.Limits.OutputBytes, func() { once.Do(func() { close(overflow) }) })
	st := newStreams(true, nonce)
	st.attach(out)
	readC := make(chan struct{})
	go func() {
		_, _ = stdcopy.StdCopy(streamWriter{st, 0}, streamWriter{st, 1}, att.Reader)
		st.end()
		close(readC)
	}()
	go func() {
		_, _ = io.Copy(att.Conn, io.MultiReader(strings.NewReader(nonce+"\n"+programHeader(lang, len(req.Code), 0, "")), strings.NewReader(req.Code), strings.NewReader(req.Stdin)))
		_ = att.CloseWrite()
	}()
	var timer <-chan time.Time
	if req.Limits.Timeout > 0 {
		t := time.NewTimer(req.Limits.Timeout)
		defer t.Stop()
		timer = t.C
	}
	res := &sandbox.Result{Sandbox: sandbox.ModeDocker, ExitCode: -1}
	start := time.Now()
	var runErr error
	ended := false
	select {
	case <-readC:
		ended = true
	case <-timer:
		res.TimedOut = true
	case <-overflow:
	case <-ctx.Done():
		runErr = fmt.Errorf("docker: call cancelled: %w", ctx.Err())
	case <-s.r.done:
		runErr = fmt.Errorf("docker: %w while the call was in flight", sandbox.ErrClosed)
	}
	res.Duration = time.Since(start)
	// The supervisor kills every process of the container but PID 1: the
	// egress relay too.
	s.relayDown = s.c.egress != nil
	status, ooms, trailer := st.final()
	if code, _ := s.r.execExit(id); ended && trailer && code == 0 {
		res.ExitCode = status
		res.OOMKilled = status != 0 && ooms > 0
		if res.OOMKilled {
			res.Signal = "killed"
		}
		out.Fill(res)
		return res, nil
	}
	// A limit or a cancel, or the supervisor did not end by itself (the
	// program can kill it: it is not the container's PID 1): every process
	// of the call is killed.
	s.killAll(nil)
	select {
	case <-readC:
	case <-time.After(drainTimeout):
	}
	if ended && runErr == nil && s.c.broken() {
		return nil, fmt.Errorf("docker: %w: the call ended without a status (its container may have stopped)", sandbox.ErrSandboxUnavailable)
	}
	res.ExitCode, res.Signal = 137, "killed"
	out.Fill(res)
	return res, runErr
}

// Close kills and removes the session's container. A call in flight is
// stopped by its caller (the Manager cancels it first).
func (s *containerSession) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if d := s.live; d != nil {
		_ = d.conn.Close()
		d.att.Close()
		s.live = nil
	}
	if h := s.filesHelper; h != nil {
		h.att.Close()
		s.filesHelper = nil
	}
	s.c.attach.Close()
	s.c.stop()
	err := s.r.remove(s.c.id)
	if s.c.egress != nil {
		// Its proxy session and socket directory.
		s.c.egress.close()
	}
	return err
}

// isClosed reports whether Close has begun.
func (r *Runner) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
