package metrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/server/principals"
)

// Stage names a point in a run's way through the runner chain.
type Stage int

// The stages a Stage decorator marks.
const (
	// StageApproved: the approval gate let the run through (place the
	// decorator right inside the gate).
	StageApproved Stage = iota
	// StageStarted: the run holds a run slot (place the decorator right
	// inside sandbox.Limit).
	StageStarted
)

// timeline records when a run reached each stage; Wrap puts one in the
// context and the Stage decorators fill it.
type timeline struct {
	mu       sync.Mutex
	begun    time.Time
	approved time.Time
	started  time.Time
}

type timelineKey struct{}

func (t *timeline) mark(s Stage, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case StageApproved:
		t.approved = at
	case StageStarted:
		t.started = at
	}
}

// Wrap returns a Runner that records every run of next: the outcome in
// codeexec_runs_total, and, with the Stage decorators inside next, the
// approval wait, queue wait and run time, labelled with next's mode. A
// request that runs no code (sandbox.Request.RunsCode) is not a run: it
// goes to next unrecorded. Place it first in the runner chain, so that
// every call counts once. Closing the returned Runner closes next. A nil
// *Metrics returns next itself.
func (m *Metrics) Wrap(next sandbox.Runner) sandbox.Runner {
	if m == nil {
		return next
	}
	return &recorded{m: m, next: next, mode: string(next.Capabilities().Mode)}
}

type recorded struct {
	m    *Metrics
	next sandbox.Runner
	mode string
}

func (r *recorded) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if !req.RunsCode() {
		return r.next.Run(ctx, req)
	}
	tl := &timeline{begun: time.Now()}
	r.m.inFlight.Inc()
	defer r.m.inFlight.Dec()
	res, err := r.next.Run(context.WithValue(ctx, timelineKey{}, tl), req)
	end := time.Now()

	tl.mu.Lock()
	begun, approved, started := tl.begun, tl.approved, tl.started
	tl.mu.Unlock()
	if !approved.IsZero() {
		r.m.approvalWait.Observe(approved.Sub(begun).Seconds())
	}
	if !started.IsZero() {
		from := begun
		if !approved.IsZero() {
			from = approved
		}
		r.m.queueWait.Observe(started.Sub(from).Seconds())
		r.m.runDuration.WithLabelValues(r.mode, req.Language).Observe(end.Sub(started).Seconds())
	}
	who := ""
	if p := principals.From(ctx); p != nil {
		who = p.Name
	}
	r.m.runs.WithLabelValues(r.mode, req.Language, r.m.principalLabel(who), Outcome(res, err)).Inc()
	return res, err
}

func (r *recorded) Capabilities() sandbox.Capabilities { return r.next.Capabilities() }
func (r *recorded) Close() error                       { return r.next.Close() }

// Stage returns a Runner that marks stage s of the run on its way to next
// (see Wrap), and is otherwise next. Closing it closes next.
func (m *Metrics) Stage(s Stage, next sandbox.Runner) sandbox.Runner {
	if m == nil {
		return next
	}
	return &staged{s: s, next: next}
}

type staged struct {
	s    Stage
	next sandbox.Runner
}

func (st *staged) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if tl, ok := ctx.Value(timelineKey{}).(*timeline); ok {
		tl.mark(st.s, time.Now())
	}
	return st.next.Run(ctx, req)
}

func (st *staged) Capabilities() sandbox.Capabilities { return st.next.Capabilities() }
func (st *staged) Close() error                       { return st.next.Close() }

// Outcome classifies a run's result and error as the outcome label of
// codeexec_runs_total.
func Outcome(res *sandbox.Result, err error) string {
	var denied *approvals.DeniedError
	var input *approvals.InputRequiredError
	switch {
	case err == nil && res == nil:
		return OutcomeError
	case err == nil:
		switch {
		case res.TimedOut:
			return OutcomeTimeout
		case res.OOMKilled:
			return OutcomeOOM
		case res.Truncated:
			return OutcomeOutputLimit
		case res.ExitCode != 0:
			return OutcomeExitNonZero
		}
		return OutcomeOK
	case errors.As(err, &input):
		return OutcomeInputRequired
	case errors.As(err, &denied), errors.Is(err, approvals.ErrNotApproved):
		return OutcomeDenied
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCancelled
	case errors.As(err, new(*principals.LimitedError)):
		return OutcomeLimited
	case errors.Is(err, sandbox.ErrUnknownLanguage), errors.Is(err, sandbox.ErrLanguageUnavailable), errors.Is(err, principals.ErrRefused):
		return OutcomeRejected
	}
	return OutcomeError
}
