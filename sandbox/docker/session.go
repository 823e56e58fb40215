package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

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
// session's maximum lifetime. Its PID 1 is the session supervisor
// (sandbox/sessions, drivers/supervisor.py, run by the image's python3),
// whose control channel is the container's attached stdin and stdout: the
// server keeps that stream open, so a server that dies takes its session
// containers down with it (StdinOnce), and the next codeexec that starts
// removes them (their owner is dead).
//
// As the container's init, the supervisor reaps every orphan, and cannot be
// signalled by the session's code; no process of the container can read its
// memory or descriptors. It runs the session's interpreter (python,
// javascript) or each bash call, and after each call stops the interpreter
// and kills every other process of the container before it reports the
// call's end; a call that times out, overflows the output cap or is
// cancelled has every process but the supervisor killed (reset), and the
// next call runs in a fresh interpreter; the files in /tmp (the session's
// working directory) stay. The supervisor also writes each call's files into
// /tmp and sends the files that calls changed there, and, under
// CODE_EXEC_NETWORK=allowlist, relays the container's connections to the
// egress proxy (a fork of itself: the session's code cannot touch it either).

const (
	roleSession = "session"
	// supervisorDiagnostics caps what a session's supervisor and
	// interpreter write on their own stderr.
	supervisorDiagnostics = 64 << 10
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
	c    *session // the container, with the supervisor's attach stream
	conn *sessions.Conn
	diag *limitedBuffer

	mu     sync.Mutex
	closed bool
	// known is what the previous call's artifacts were found with, to
	// find the next call's against (see collectChanges).
	known artifacts.Snapshot
	ooms  int // the container's OOM kills seen so far
}

func (b sessionBackend) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	r := b.r
	lang := spec.Language
	if !slices.Contains(r.cfg.Languages, lang) {
		return nil, fmt.Errorf("docker: %w: %s is disabled by CODE_EXEC_LANGUAGES", sandbox.ErrLanguageUnavailable, lang)
	}
	in, ok := r.interps[lang]
	if !ok {
		st, _ := r.caps.Language(lang)
		return nil, fmt.Errorf("docker: %w: %s cannot run in the image %s: %s", sandbox.ErrLanguageUnavailable, lang, r.cfg.Image, st.Reason)
	}
	python := r.relayPython
	if lang == "python" {
		python = in.Path
	}
	if python == "" {
		return nil, fmt.Errorf("docker: %w: sessions need python3 in the image %s (it runs each session's supervisor)", sandbox.ErrLanguageUnavailable, r.cfg.Image)
	}
	if err := r.beginRun(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	var relay []string
	if r.cfg.Egress != nil {
		relay = []string{egressMount + "/" + egressSocket, strconv.Itoa(egressPort), relayProgram}
	}
	interp := append([]string{in.Path}, slices.Clone(sandbox.Languages[lang].Args)...)
	pr, pw := io.Pipe()
	diag := &limitedBuffer{max: supervisorDiagnostics}
	c, err := r.start(ctx, containerSpec{
		role:     roleSession,
		cmd:      append([]string{python}, sessions.SupervisorArgs(lang, "fd:0", "fd:1", interp, relay...)...),
		limits:   containerLimits(spec.Limits),
		deadline: spec.Deadline.Add(leftoverGrace),
		packages: spec.PackageDir,
		lang:     lang,
		egress:   r.cfg.Egress != nil,
		stdout:   pw,
		stderr:   diag,
	}, lang)
	if err != nil {
		return nil, err
	}
	// No call has run yet: every call of the session reaches only what
	// its own allowlist allows.
	c.restrict(spec.Network)
	s := &containerSession{r: r, spec: spec, c: c, conn: sessions.NewConn(c.attach.Conn, pr), diag: diag}
	sctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	if _, err := s.conn.WaitReady(sctx); err != nil {
		_ = s.conn.Close()
		r.discard(c)
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("docker: starting the %s session: %w", lang, cerr)
		}
		return nil, fmt.Errorf("docker: %w: the %s session did not start (%v) %s", sandbox.ErrSandboxUnavailable, lang, err, strings.TrimSpace(diag.String()))
	}
	r.log.Debug("session container started", "id", shortID(c.id), "session", spec.ID, "language", lang)
	return s, nil
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
	if s.c.broken() || s.conn.Err() != nil {
		return nil, fmt.Errorf("docker: %w: the session's container %s has stopped (for example by a restart of the Docker Engine); close the session and create another", sandbox.ErrSandboxUnavailable, shortID(s.c.id))
	}
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
	res, err := sessions.Call(ctx, s.conn, req, sessions.CallHooks{
		Mode: sandbox.ModeDocker,
		Reset: func() error {
			rctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			return s.conn.Reset(rctx)
		},
		OOM: func(res *sandbox.Result, ooms int) {
			if ooms >= 0 {
				// The container's own count, as the supervisor read it.
				res.OOMKilled = ooms > s.ooms && res.ExitCode != 0
				s.ooms = max(s.ooms, ooms)
			} else if res.StateLost && !res.TimedOut && !res.Truncated && ctx.Err() == nil {
				// An interpreter SIGKILLed while its call ran on: nothing
				// in the container but the program can do that, except the
				// kernel's OOM killer. (A call that timed out, overflowed
				// the cap or was cancelled was killed by the server.)
				res.OOMKilled = res.Signal == "killed"
			}
		},
		Network: func(res *sandbox.Result) {
			if s.c.egress != nil {
				// What this call reached, and no connection of it beyond it.
				res.Network = s.c.egress.session.Cut()
			}
		},
		Known: &s.known,
	})
	if err != nil && ctx.Err() != nil && s.r.isClosed() {
		return res, fmt.Errorf("docker: %w while the call was in flight", sandbox.ErrClosed)
	}
	if err != nil {
		return res, fmt.Errorf("docker: %w", err)
	}
	return res, nil
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
	_ = s.conn.Close()
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
