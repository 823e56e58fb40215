package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/codeexec/codeexec/sandbox"
)

// drainTimeout bounds how long output may keep arriving after the
// container has stopped.
const drainTimeout = 5 * time.Second

// Run runs req in a fresh container and removes the container before it
// returns, whatever happened.
//
// A program that ran is a Result with a nil error, whatever its exit code;
// the timeout, the memory limit and the output cap are reported in the
// Result. Errors wrap sandbox.ErrUnknownLanguage, sandbox.ErrLanguageUnavailable,
// sandbox.ErrSandboxUnavailable (the engine failed), sandbox.ErrClosed, or
// ctx's error when ctx ended during the run (with the partial Result).
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	lang, err := sandbox.CanonicalLanguage(req.Language)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
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
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("docker: run not started: %w", err)
	}

	s, err := r.start(ctx, containerSpec{role: "run", cmd: bootstrapCommand(r.boot), limits: req.Limits})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("docker: run cancelled while starting (%v): %w", err, cerr)
		}
		return nil, err
	}
	defer r.discard(s)
	input := io.MultiReader(
		strings.NewReader(bootstrapHeader(lang, len(req.Code))),
		strings.NewReader(req.Code),
		strings.NewReader(req.Stdin),
	)
	return r.exchange(ctx, s, input, req.Limits)
}

// exchange feeds input to a started session, collects its output within
// the limits, and returns once the container has stopped and its output is
// drained. It kills the container on timeout, on output overflow, when ctx
// ends and when the Runner closes. The caller discards the session.
func (r *Runner) exchange(ctx context.Context, s *session, input io.Reader, lim sandbox.Limits) (*sandbox.Result, error) {
	overflow := make(chan struct{})
	var overflowOnce sync.Once
	out := sandbox.NewOutput(lim.OutputBytes, func() { overflowOnce.Do(func() { close(overflow) }) })

	started := time.Now()
	wrote := make(chan error, 1)
	go func() {
		_, err := io.Copy(s.attach.Conn, input)
		if cerr := s.attach.CloseWrite(); err == nil {
			err = cerr
		}
		wrote <- err
	}()
	read := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out.Stdout(), out.Stderr(), s.attach.Reader)
		read <- err
	}()
	var timeout <-chan time.Time
	if lim.Timeout > 0 {
		t := time.NewTimer(lim.Timeout)
		defer t.Stop()
		timeout = t.C
	}

	res := &sandbox.Result{Sandbox: sandbox.ModeDocker, ExitCode: -1}
	var (
		w      waitResult
		exited bool
		killed bool
		runErr error
	)
	select {
	case w = <-s.exited:
		exited = true
	case <-timeout:
		res.TimedOut = true
	case <-overflow:
		// out.Fill sets Truncated.
	case <-ctx.Done():
		runErr = fmt.Errorf("docker: run cancelled: %w", ctx.Err())
	case <-r.done:
		runErr = fmt.Errorf("docker: %w while the run was in flight", sandbox.ErrClosed)
	}
	if !exited {
		killed = true
		r.kill(s.id)
		select {
		case w = <-s.exited:
		case <-time.After(cleanupTimeout):
			w = waitResult{code: -1, err: errors.New("the container did not stop after SIGKILL")}
		}
	}
	res.Duration = time.Since(started)

	// Output written just before the exit may still be in flight.
	select {
	case err := <-read:
		if err != nil && !killed {
			r.log.Debug("reading container output", "id", shortID(s.id), "err", err)
		}
	case <-time.After(drainTimeout):
		r.log.Warn("container output did not end after the container stopped", "id", shortID(s.id))
		s.attach.Close()
		<-read
	}
	s.attach.Close() // unblocks a writer whose program never read its stdin
	<-wrote
	out.Fill(res)

	state, ierr := r.inspectState(s.id)
	switch {
	case w.err == nil:
		res.ExitCode = int(w.code)
	case ierr == nil && !state.Running:
		res.ExitCode = state.ExitCode
	case runErr == nil:
		return nil, engineErr("waiting for the program to end", w.err)
	}
	if ierr != nil {
		if runErr != nil {
			return res, runErr
		}
		// Without the final state nothing can be said about an OOM kill,
		// and an engine that stops kills its containers (exit 137) on the
		// way: report the engine, not a result that may be wrong.
		return nil, engineErr("reading the state of the finished container", ierr)
	}
	// The engine records that the kernel's OOM killer acted inside the
	// container. It is reported only when the program failed: a program
	// that exited 0 after a child was killed ran to completion. An exit
	// code of 137 alone is never taken as an OOM kill (timeouts and the
	// output cap kill with SIGKILL too).
	res.OOMKilled = state.OOMKilled && res.ExitCode != 0
	if killed || res.OOMKilled {
		res.Signal = "killed"
	}
	return res, runErr
}
