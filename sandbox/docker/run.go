package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
)

// drainTimeout bounds how long output may keep arriving after the
// container has stopped.
const drainTimeout = 5 * time.Second

// Run runs req in a container of its own and removes the container after
// it returns, whatever happened. With a pool, the container is a warm one
// that was created and started ahead of time and has never run anything;
// when none is ready, or the warm one turns out broken before it took the
// program, a container is created for the run (cold) at once.
//
// A program that ran is a Result with a nil error, whatever its exit code;
// the timeout, the memory limit and the output cap are reported in the
// Result. Errors wrap sandbox.ErrUnknownLanguage, sandbox.ErrLanguageUnavailable,
// sandbox.ErrSandboxUnavailable (the engine failed), sandbox.ErrClosed, or
// ctx's error when ctx ended during the run (with the partial Result).
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	lang, err := runproto.CheckLanguage("docker", req.Language, r.cfg.Languages, r.interps, r.caps, r.cfg.Image)
	if err != nil {
		return nil, err
	}
	art, err := runproto.CheckFiles(lang, req)
	if err != nil {
		return nil, err
	}
	if err := r.beginRun(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("docker: run not started: %w", err)
	}
	entry, err := r.packageEntry(req.PackageDir)
	if err != nil {
		return nil, err
	}
	input := func() io.Reader {
		prog, _ := runproto.Program(lang, req.Code, req.Files, req.Stdin, entry)
		return prog
	}

	if s := r.poolFor(lang, req, entry); s != nil {
		r.observe(s.id, true)
		s.restrict(req.Network)
		res, err, fault := r.exchange(ctx, s, input(), req.Limits, req.Observe, art, true)
		if !fault {
			r.networkReport(s, res)
		}
		r.release(s)
		if !fault {
			return res, err
		}
		r.log.Info("a warm container broke before it took the program; running it in a new container", "id", shortID(s.id), "err", err)
	}

	spec := r.runSpec(lang, req.Limits, roleRun, runDeadline(time.Now(), req.Limits.Timeout), ifEntry(entry, req.PackageDir))
	spec.env = req.Env
	s, err := r.start(ctx, spec, lang)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("docker: run cancelled while starting (%v): %w", err, cerr)
		}
		return nil, err
	}
	r.observe(s.id, false)
	s.restrict(req.Network)
	defer r.release(s)
	res, err, _ := r.exchange(ctx, s, input(), req.Limits, req.Observe, art, false)
	r.networkReport(s, res)
	return res, err
}

// restrict narrows what the container's program may reach to the run's own
// allowlist (sandbox.Request.Network), before the program is handed over.
func (s *session) restrict(a *egress.Allowlist) {
	if s.egress != nil {
		s.egress.session.Restrict(a)
	}
}

// networkReport ends the container's egress session, once the program has
// ended, and puts its report in res.
func (r *Runner) networkReport(s *session, res *sandbox.Result) {
	if s.egress == nil {
		return
	}
	rep := s.egress.close()
	if res != nil {
		res.Network = rep
	}
}

// observe tells a test which container served a run.
func (r *Runner) observe(id string, warm bool) {
	if r.onRun != nil {
		r.onRun(id, warm)
	}
}

// exchange feeds input to a started session, collects its output within
// the limits, and returns once the program has ended: once the container's
// stream has ended and the engine has reported its exit. For a run container
// (framed), the result is the supervisor's only when it exited 0 and its
// trailer ends stderr (see runproto); otherwise the engine's view
// decides. It kills the container on timeout, on output overflow, when ctx
// ends and when the Runner closes. The timeout starts when the input is handed
// over and runs until the end, the archive of the working directory included.
// The caller releases the session.
//
// fault is set when a warm session (warm) ended before its bootstrap took
// the program: the program never ran, and the run may be retried elsewhere.
//
// With art, the archive of the working directory that the supervisor sends
// after the program has ended is read into Result.Artifacts.
func (r *Runner) exchange(ctx context.Context, s *session, input io.Reader, lim sandbox.Limits, observe sandbox.ObserveFunc, art *runproto.Collect, warm bool) (res *sandbox.Result, err error, fault bool) {
	out, overflow := s.attachOutput(lim.OutputBytes, observe, art)
	started := time.Now()
	go s.feed(input)
	res = &sandbox.Result{Sandbox: sandbox.ModeDocker, ExitCode: -1}
	end := r.await(ctx, s, lim.Timeout, overflow, res)
	res.Duration = time.Since(started)
	r.settle(s, &end)
	out.Fill(res)
	return r.outcome(ctx, s, res, end, art, warm)
}

// exchangeEnd is how an exchange ended.
type exchangeEnd struct {
	// killed: the exchange killed the container (timeout, output cap,
	// ctx, the Runner's Close).
	killed bool
	// err says why, when neither the program nor a limit ended the run.
	err error
	// exit is the engine's exit of the container; streamEnded says
	// whether the container's stream ended.
	exit        waitResult
	streamEnded bool
}

// attachOutput gives the session's streams the run's output, capped at
// limit bytes (overflow is closed when the cap is reached) and observed
// live, and, with art, the collection of the artifacts.
func (s *session) attachOutput(limit int64, observe sandbox.ObserveFunc, art *runproto.Collect) (*sandbox.Output, <-chan struct{}) {
	overflow := make(chan struct{})
	var overflowOnce sync.Once
	out := sandbox.NewOutput(limit, func() { overflowOnce.Do(func() { close(overflow) }) }).Observe(observe)
	s.out.Attach(out)
	if art != nil {
		s.out.Collect(art.Before, art.Opts)
	}
	return out, overflow
}

// feed writes input to the container's stdin and closes it. A write error
// means the container or its stream went away; the exit or the end of the
// stream says the rest. The copy ends at the latest when the session is
// released and its stream closed.
func (s *session) feed(input io.Reader) {
	_, _ = io.Copy(s.attach.Conn, input)
	_ = s.attach.CloseWrite()
}

// await waits until the program has ended (the container's stream has
// ended and the engine has reported its exit, or, with a secret nonce, its
// supervisor's trailers came), or until a limit, ctx or the Runner's Close
// ends the run first; a timeout is set in res.
func (r *Runner) await(ctx context.Context, s *session, timeoutAfter time.Duration, overflow <-chan struct{}, res *sandbox.Result) (end exchangeEnd) {
	var timeout <-chan time.Time
	if timeoutAfter > 0 {
		t := time.NewTimer(timeoutAfter)
		defer t.Stop()
		timeout = t.C
	}
	var drain <-chan time.Time // output still in flight after the exit
	readC, exitedC := s.readC, s.exitedC
	var doneC <-chan struct{}
	if s.secret {
		// The nonce is PID 1's secret: its trailers end the run.
		doneC = s.out.Trailers()
	}
	for readC != nil || exitedC != nil {
		select {
		case <-doneC:
			return end
		case <-readC:
			readC = nil
		case <-exitedC:
			exitedC = nil
			if readC != nil {
				t := time.NewTimer(drainTimeout)
				defer t.Stop()
				drain = t.C
			}
		case <-drain:
			r.log.Warn("container output did not end after the container stopped", "id", shortID(s.id))
			return end
		case <-timeout:
			res.TimedOut, end.killed = true, true
			return end
		case <-overflow:
			end.killed = true // out.Fill sets Truncated
			return end
		case <-ctx.Done():
			end.err, end.killed = fmt.Errorf("docker: run cancelled: %w", ctx.Err()), true
			return end
		case <-r.done:
			end.err, end.killed = fmt.Errorf("docker: %w while the run was in flight", sandbox.ErrClosed), true
			return end
		}
	}
	return end
}

// settle kills the container when the exchange ended the run, waits a
// bounded time for it to stop, and records in end the engine's exit and
// whether the stream ended.
func (r *Runner) settle(s *session, end *exchangeEnd) {
	if end.killed {
		r.kill(s.id)
		select {
		case <-s.exitedC:
		case <-time.After(cleanupTimeout):
		}
		select {
		case <-s.readC:
		case <-time.After(drainTimeout):
		}
	}
	end.exit = waitResult{code: -1, err: errors.New("the container did not stop after SIGKILL")}
	select {
	case <-s.exitedC:
		end.exit = s.exit
	default:
		if !end.killed {
			end.exit.err = errors.New("the container has not stopped yet")
		}
	}
	select {
	case <-s.readC:
		end.streamEnded = true
	default:
	}
}

// outcome is the result of an exchange that ended as end: the supervisor's
// when its end can be trusted, otherwise the engine's view; fault as for
// exchange.
func (r *Runner) outcome(ctx context.Context, s *session, res *sandbox.Result, end exchangeEnd, art *runproto.Collect, warm bool) (*sandbox.Result, error, bool) {
	status, ooms, trailer := s.out.Final()
	byTrailer := s.secret && trailer && s.out.ArchiveTrusted()
	w := end.exit
	if s.out.Framed() && !end.killed && (byTrailer || end.streamEnded && trailer && w.err == nil && w.code == 0) {
		// The supervisor's end: it wrote its trailers after every process
		// of the program had ended, and (without a secret nonce) it exited
		// by itself and its trailer was the last thing on stderr.
		r.supervisorResult(ctx, s, res, status, ooms, art)
		return res, nil, false
	}
	if !s.out.Framed() && !end.killed && end.err == nil {
		// Not a run container (the probe): the engine's exit is the result.
		return r.finishFromEngine(s, res, w, false, nil)
	}
	if warm && end.err == nil && !s.out.Acked() {
		return nil, fmt.Errorf("docker: %w: the warm container %s stopped before it took the program", sandbox.ErrSandboxUnavailable, shortID(s.id)), true
	}
	if s.out.Framed() && !end.killed && end.err == nil {
		// The container stopped without its supervisor's end: PID 1 itself
		// was killed, from outside (an engine that stops kills its
		// containers, so does docker kill or docker rm -f) or by the OOM
		// killer. Only the latter is the program's doing; otherwise the
		// program did not end by itself, and no exit status is its own.
		res.ExitCode = -1
		res, err, _ := r.finishFromEngine(s, res, w, false, nil)
		if err != nil || res.OOMKilled {
			return res, err, false
		}
		return nil, fmt.Errorf("docker: %w: the container %s was stopped from outside before the program ended (exit status %d), for example by a restart of the Docker Engine",
			sandbox.ErrSandboxUnavailable, shortID(s.id), res.ExitCode), false
	}
	return r.finishFromEngine(s, res, w, end.killed, end.err)
}

// supervisorResult completes res from the supervisor's trailers: the exit
// status, an OOM kill (asked of the engine when the container could not
// read its memory cgroup), and, with art, the artifacts.
func (r *Runner) supervisorResult(ctx context.Context, s *session, res *sandbox.Result, status, ooms int, art *runproto.Collect) {
	res.ExitCode = status
	switch {
	case status == 0:
	case ooms >= 0:
		// An OOM kill is reported only when the program failed: a
		// program that exited 0 after a child was killed ran to
		// completion.
		res.OOMKilled = ooms > 0
	default:
		// The container could not read its memory cgroup: ask the
		// engine.
		res.OOMKilled = r.engineOOM(s)
	}
	if res.OOMKilled {
		res.Signal = "killed"
	}
	if art != nil {
		res.Artifacts = s.out.Artifacts(ctx.Done())
		if res.Artifacts != nil && !s.out.ArchiveTrusted() {
			res.Artifacts = &artifacts.Collection{Incomplete: "the program wrote a copy of the end-of-run marker, so its output and its working directory could not be told apart"}
		}
	}
}

// finishFromEngine completes a result from the engine's view of the stopped
// container: the exit code (when the trailer did not give it) and whether
// the kernel's OOM killer acted.
func (r *Runner) finishFromEngine(s *session, res *sandbox.Result, w waitResult, killed bool, runErr error) (*sandbox.Result, error, bool) {
	state, ierr := r.inspectState(s.id)
	switch {
	case res.ExitCode >= 0:
	case w.err == nil:
		res.ExitCode = int(w.code)
	case ierr == nil && !state.Running:
		res.ExitCode = state.ExitCode
	case runErr == nil:
		return nil, engineErr("waiting for the program to end", w.err), false
	}
	if ierr != nil {
		if runErr != nil {
			return res, runErr, false
		}
		// Without the final state nothing can be said about an OOM kill,
		// and an engine that stops kills its containers (exit 137) on the
		// way: report the engine, not a result that may be wrong.
		return nil, engineErr("reading the state of the finished container", ierr), false
	}
	// An exit code of 137 alone is never taken as an OOM kill (timeouts
	// and the output cap kill with SIGKILL too).
	res.OOMKilled = state.OOMKilled && res.ExitCode != 0
	if killed || res.OOMKilled {
		res.Signal = "killed"
	}
	return res, runErr, false
}

// engineOOM asks the engine whether the OOM killer acted in the container,
// once it has stopped (the engine records it with the exit).
func (r *Runner) engineOOM(s *session) bool {
	select {
	case <-s.exitedC:
	case <-time.After(cleanupTimeout):
	}
	state, err := r.inspectState(s.id)
	return err == nil && state.OOMKilled
}
