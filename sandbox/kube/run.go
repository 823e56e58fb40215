package kube

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
)

const (
	// drainTimeout bounds how long output may keep arriving after the
	// pod's status says its container ended, and how long a killed pod's
	// stream may take to end.
	drainTimeout = 30 * time.Second
	// statusTimeout bounds how long the pod's status may take to say that
	// its container ended once its output stream has ended (the kubelet
	// notices a container's exit when it next lists them, about every
	// second).
	statusTimeout = 30 * time.Second
)

// Run runs req in a pod of its own and deletes the pod when it returns,
// whatever happened. With a pool, the pod is a warm one that was made and
// attached ahead of time and has run nothing; when none is ready, or the
// warm one turns out broken before it took the program, a pod is made for
// the run (cold) at once.
//
// A program that ran is a Result with a nil error, whatever its exit code;
// the timeout, the memory limit and the output cap are reported in the
// Result. Errors wrap sandbox.ErrUnknownLanguage,
// sandbox.ErrLanguageUnavailable, sandbox.ErrSandboxUnavailable (the cluster
// failed), sandbox.ErrClosed, or ctx's error when ctx ended during the run
// (with the partial Result).
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	lang, err := runproto.CheckLanguage("kubernetes", req.Language, r.cfg.Languages, r.interps, r.caps, r.cfg.Image)
	if err != nil {
		return nil, err
	}
	if req.PackageDir != nil {
		return nil, fmt.Errorf("kubernetes: %w: packages are not available in kubernetes mode yet", sandbox.ErrSandboxUnavailable)
	}
	if len(req.Env) > 0 {
		// Capabilities.RunEnv is false: the server gives none (it refuses
		// CODE_EXEC_RUN_TOKEN_KEY in this mode), and none is dropped.
		return nil, fmt.Errorf("kubernetes: %w: a run's own environment (a run token) is not available in kubernetes mode yet", sandbox.ErrSandboxUnavailable)
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
		return nil, fmt.Errorf("kubernetes: run not started: %w", err)
	}
	input := func() io.Reader {
		prog, n := runproto.Program(lang, req.Code, req.Files, req.Stdin, "")
		return io.MultiReader(strings.NewReader(runproto.Length(n)), prog)
	}

	if s, ok := r.pool.Take(lang, req.Limits); ok {
		r.observe(s.name, true)
		s.restrict(req.Network)
		res, err, fault := r.exchange(ctx, s, input(), req.Limits, req.Observe, art, true)
		r.networkReport(s, res)
		r.release(s)
		if !fault {
			return res, err
		}
		r.log.Info("a warm pod broke before it took the program; running it in a new pod", "pod", s.name, "err", err)
	}

	s, err := r.start(ctx, r.runSpec(lang, req.Limits, roleRun, runDeadline(time.Now(), req.Limits.Timeout)))
	if err != nil {
		return nil, err
	}
	r.observe(s.name, false)
	s.restrict(req.Network)
	defer r.release(s)
	res, err, _ := r.exchange(ctx, s, input(), req.Limits, req.Observe, art, false)
	r.networkReport(s, res)
	return res, err
}

// observe tells a test which pod served a run.
func (r *Runner) observe(name string, warm bool) {
	if r.onRun != nil {
		r.onRun(name, warm)
	}
}

// exchange feeds input to a started session, collects its output within
// the limits, and returns once the program has ended. With a supervisor
// that keeps its nonce secret (podSession.secret), that is when both its
// trailers and the archive of the working directory have arrived: it wrote
// them once every process of the program was gone, and no process of the
// run can forge them, so the kubelet's report of the container's exit,
// about a second later, is not waited for. Otherwise it is once the pod's
// stream has ended and its status says how its container ended, and the
// result is the supervisor's only when its container exited 0 and its
// trailer ends stderr (runproto's rule). When the supervisor's end is not
// there, the pod's status decides. It deletes the pod on timeout, on
// output overflow, when ctx ends and when the Runner closes, and returns
// once the pod's stream has ended (every process of the run is gone) or
// drainTimeout passed. The timeout starts when the input is handed over
// and runs until the end, the archive of the working directory included.
// The caller releases the session.
//
// fault is set when a warm session (warm) ended before its bootstrap took
// the program: the program never ran, and the run may be retried elsewhere.
func (r *Runner) exchange(ctx context.Context, s *podSession, input io.Reader, lim sandbox.Limits, observe sandbox.ObserveFunc, art *runproto.Collect, warm bool) (res *sandbox.Result, err error, fault bool) {
	overflow := make(chan struct{})
	var overflowOnce sync.Once
	out := sandbox.NewOutput(lim.OutputBytes, func() { overflowOnce.Do(func() { close(overflow) }) }).Observe(observe)
	s.out.Attach(out)
	if art != nil {
		s.out.Collect(art.Before, art.Opts)
	}

	started := time.Now()
	go func() {
		// A write error means the stream went away; its end says the rest.
		_, _ = io.Copy(s.stdin, input)
		if s.out.Framed() {
			r.sayBye(s)
		}
		_ = s.stdin.Close()
	}()
	var timeout <-chan time.Time
	if lim.Timeout > 0 {
		t := time.NewTimer(lim.Timeout)
		defer t.Stop()
		timeout = t.C
	}

	res = &sandbox.Result{Sandbox: sandbox.ModeKubernetes, ExitCode: -1}
	var (
		killed bool
		runErr error
		late   <-chan time.Time // the status or the output is late
	)
	streamC, exitedC := s.streamDone, s.exitedC
	var endC <-chan struct{} // the secret supervisor's end
	if s.secret && s.out.Framed() {
		endC = supervisorEnd(s)
	}
	var bySupervisor bool
wait:
	for streamC != nil || exitedC != nil {
		select {
		case <-endC:
			bySupervisor = true
			if res.Duration == 0 {
				res.Duration = time.Since(started)
			}
			break wait
		case <-streamC:
			streamC = nil
			// The program's time ends with its output; the kubelet's
			// report of the exit is not the program's.
			res.Duration, timeout = time.Since(started), nil
			if exitedC != nil {
				t := time.NewTimer(statusTimeout)
				defer t.Stop()
				late = t.C
			}
		case <-exitedC:
			exitedC = nil
			if streamC != nil {
				t := time.NewTimer(drainTimeout)
				defer t.Stop()
				late = t.C
			}
		case <-late:
			if streamC != nil {
				r.log.Warn("the pod's output did not end after its container ended", "pod", s.name)
			} else {
				r.log.Warn("the pod's status did not say how its container ended", "pod", s.name, "waited", statusTimeout)
			}
			break wait
		case <-timeout:
			res.TimedOut, killed = true, true
			break wait
		case <-overflow:
			killed = true // out.Fill sets Truncated
			break wait
		case <-ctx.Done():
			runErr, killed = fmt.Errorf("kubernetes: run cancelled: %w", ctx.Err()), true
			break wait
		case <-r.done:
			runErr, killed = fmt.Errorf("kubernetes: %w while the run was in flight", sandbox.ErrClosed), true
			break wait
		}
	}
	if res.Duration == 0 {
		res.Duration = time.Since(started)
	}
	if killed {
		r.kill(s)
	}
	out.Fill(res)

	status, ooms, ok := s.out.Finished(isClosed(s.streamDone), isClosed(s.exitedC) && !s.exit.gone && s.exit.code == 0)
	if bySupervisor {
		status, ooms, ok = s.out.Final()
	}
	if ok && !killed {
		// The supervisor's end: its secret trailers came, or it exited by
		// itself, after every process of the program, and its trailer was
		// the last thing on stderr.
		if r.onEnd != nil {
			r.onEnd(s.name, bySupervisor)
		}
		res.ExitCode = status
		switch {
		case status == 0:
		case ooms >= 0:
			// An OOM kill is reported only when the program failed: a
			// program that exited 0 after a child was killed ran to
			// completion.
			res.OOMKilled = ooms > 0
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
		return res, nil, false
	}
	if killed {
		res.ExitCode, res.Signal = 137, "killed"
		return res, runErr, false
	}
	if !isClosed(s.exitedC) {
		return nil, fmt.Errorf("kubernetes: %w: the kubelet did not report how the pod %s ended within %s of the end of its output", sandbox.ErrSandboxUnavailable, s.name, statusTimeout), false
	}
	ex := s.exit
	if !s.out.Framed() {
		// Not a run pod (the probe): the pod's status is the result.
		res.ExitCode = int(ex.code)
		if ex.gone {
			return nil, fmt.Errorf("kubernetes: %w: the pod %s was deleted from outside", sandbox.ErrSandboxUnavailable, s.name), false
		}
		return res, nil, false
	}
	if warm && !s.out.Acked() {
		return nil, fmt.Errorf("kubernetes: %w: the warm pod %s ended before it took the program", sandbox.ErrSandboxUnavailable, s.name), true
	}
	// The pod ended without its supervisor's end: PID 1 itself was killed,
	// from outside (the pod was deleted, its node lost it) or by the OOM
	// killer. Only the latter is the program's doing; otherwise the
	// program did not end by itself, and no exit status is its own.
	if ex.reason == "OOMKilled" {
		res.ExitCode, res.OOMKilled, res.Signal = int(ex.code), true, "killed"
		return res, nil, false
	}
	if ex.gone {
		return nil, fmt.Errorf("kubernetes: %w: the pod %s was deleted from outside before the program ended", sandbox.ErrSandboxUnavailable, s.name), false
	}
	return nil, fmt.Errorf("kubernetes: %w: the pod %s was stopped from outside before the program ended (%s, exit status %d)",
		sandbox.ErrSandboxUnavailable, s.name, ex.reason, ex.code), false
}

// sayBye lets the supervisor exit (see runproto.Command's hold) once the
// output looks settled: both trailers and the archive have arrived. It gives
// up when the stream ends.
func (r *Runner) sayBye(s *podSession) {
	if awaitSettled(s) {
		_, _ = io.WriteString(s.stdin, runproto.Bye(s.nonce))
	}
}

// awaitSettled waits until the output looks settled, both trailers and
// the archive there (runproto.Streams.Settled), and reports true, or until
// the pod's stream ends first (false).
func awaitSettled(s *podSession) bool {
	for {
		ok, changed := s.out.Settled()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-s.streamDone:
			return false
		}
	}
}

// supervisorEnd returns a channel that is closed once a supervisor whose
// nonce is secret has ended the run: both its trailers, with the same
// status, and the archive of the working directory have arrived. It is
// never closed if the stream ends first.
func supervisorEnd(s *podSession) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		if !awaitSettled(s) {
			return
		}
		if _, _, ok := s.out.Final(); ok && s.out.ArchiveTrusted() {
			close(c)
		}
	}()
	return c
}

// kill ends a run at once: kill -9 -1 in its container (over pods/exec)
// ends every process of the run but PID 1, the supervisor, which then ends
// the pod; the pod is deleted too (grace period 0: the kubelet kills what
// is left, after at least two seconds), and kill returns once the pod's
// output stream has ended, so every process of the run is gone, or after
// drainTimeout.
func (r *Runner) kill(s *podSession) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := r.execKill(ctx, s.name); err != nil {
		r.log.Debug("kill -9 -1 in a pod failed; its deletion kills it", "pod", s.name, "err", err)
	}
	r.deletePod(s.name)
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-s.streamDone:
	case <-t.C:
		r.log.Warn("the output of a killed pod did not end in time", "pod", s.name, "waited", drainTimeout)
	}
}
