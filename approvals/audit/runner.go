package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
)

// ErrWrite is wrapped when the record cannot be written. Nothing runs that
// could not be recorded.
var ErrWrite = errors.New("the audit log could not be written")

// Runner is the audit layer of the runner chain: it records every request
// that reaches it and every run, in a Log. Placed right inside an
// approvals.Gate, whose Recorder it is, it files each run under the request
// that the Gate recorded and decided on (approvals.Decided); a request that
// no Gate decided on is recorded here, with the policy never, before it
// goes on. A request that cannot be recorded does not run; a run whose
// outcome cannot be recorded returns an error wrapping ErrWrite.
type Runner struct {
	next sandbox.Runner
	log  *Log
	slog *slog.Logger
}

var (
	_ sandbox.Runner     = (*Runner)(nil)
	_ approvals.Recorder = (*Runner)(nil)
)

// Wrap returns the audit layer in front of next, recording in log (which
// the caller closes). Closing the Runner closes next.
func Wrap(next sandbox.Runner, log *Log, logger *slog.Logger) *Runner {
	if logger == nil {
		logger = slog.Default()
	}
	return &Runner{next: next, log: log, slog: logger}
}

// Requested records a request before it is decided on (approvals.Recorder).
func (r *Runner) Requested(a approvals.Ask, p approvals.Policy) error {
	stdin, timeout := a.StdinBytes, a.TimeoutMS
	return r.append(Entry{
		Event: EventRequest, ID: a.ID, CodeSHA256: a.CodeSHA256, Language: a.Language, Code: a.Code, Files: withoutText(a.Files),
		Workspace: a.Workspace, Packages: a.Packages, Action: a.Action, StdinSize: &stdin, TimeoutMS: &timeout, Policy: p,
		Reasons: a.Reasons, Requester: &a.Requester, Session: a.Session, Time: a.Created, NetworkPolicy: a.Network,
	})
}

// Decided records a decision (approvals.Recorder).
func (r *Runner) Decided(d approvals.Decision) error {
	return r.append(Entry{Event: EventDecision, ID: d.ID, CodeSHA256: d.CodeSHA256, Outcome: d.Outcome, By: d.By, Via: d.Via, Note: d.Note, Time: d.At})
}

// Run records req (unless a Gate did), runs it on the next Runner and
// records how the run ended.
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	d, decided := approvals.Decided(ctx)
	if !decided {
		a := approvals.Describe(req, approvals.CallFrom(ctx).Requester, r.next.Capabilities())
		if err := r.Requested(a, approvals.PolicyNever); err != nil {
			return nil, err
		}
		d = approvals.Decision{ID: a.ID, CodeSHA256: a.CodeSHA256}
		ctx = approvals.WithDecided(ctx, d)
	}
	res, err := r.next.Run(ctx, req)
	e := Entry{Event: EventRun, ID: d.ID, CodeSHA256: d.CodeSHA256, Session: req.Session, Sandbox: string(r.next.Capabilities().Mode)}
	if res != nil {
		code, ms := res.ExitCode, float64(res.Duration.Microseconds())/1000
		e.ExitCode, e.DurationMS, e.LimitHit, e.Signal, e.Network = &code, &ms, res.LimitHit(), res.Signal, res.Network
		if res.Sandbox != "" {
			e.Sandbox = string(res.Sandbox)
		}
	}
	if err != nil {
		e.Error = err.Error()
	}
	if aerr := r.log.Append(e); aerr != nil {
		r.slog.Error("audit log", "err", aerr)
		return nil, fmt.Errorf("%w after the run: %v", ErrWrite, aerr)
	}
	return res, err
}

// Capabilities are the next Runner's.
func (r *Runner) Capabilities() sandbox.Capabilities { return r.next.Capabilities() }

// Close closes the next Runner.
func (r *Runner) Close() error { return r.next.Close() }

// append writes e, or returns an error wrapping ErrWrite.
func (r *Runner) append(e Entry) error {
	if err := r.log.Append(e); err != nil {
		r.slog.Error("audit log", "err", err)
		return fmt.Errorf("%w: %v", ErrWrite, err)
	}
	return nil
}

// withoutText is files without their text, for the audit log (which binds
// them by their digests).
func withoutText(files []approvals.AskFile) []approvals.AskFile {
	if files == nil {
		return nil
	}
	out := make([]approvals.AskFile, len(files))
	for i, f := range files {
		f.Text = ""
		out[i] = f
	}
	return out
}
