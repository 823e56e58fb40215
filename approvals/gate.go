package approvals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// Approver asks a person whether a run may go ahead. Approve blocks until
// there is a decision or ctx ends (then it returns ctx's error). A request
// that nobody answers in time is decided OutcomeTimedOut, not an error.
type Approver interface {
	Approve(ctx context.Context, a Ask) (Decision, error)
}

// GateConfig configures a Gate.
type GateConfig struct {
	// Policy says which runs need approval.
	Policy Policy
	// Timeout is how long a request waits for a person before it is denied.
	Timeout time.Duration
	// Audit records every request, decision and run; nil records nothing.
	Audit *AuditLog
	// OutOfBand reports whether people answer on the approvals console or
	// CLI (the Gate's Broker). Without it, a run that needs approval and
	// brings no decision (from elicitation) is denied OutcomeUnavailable.
	OutOfBand bool
	// WaitInterval is how often a waiting run's WaitFunc is called (5s if 0).
	WaitInterval time.Duration
	Logger       *slog.Logger
}

// Gate is a sandbox.Runner that asks before it runs: when its Policy
// requires approval for a request, the request waits (before it takes a run
// slot in the Runner it wraps) for a person's decision on the Gate's Broker,
// unless its context already carries a decision for exactly this request
// (WithDecision). Code that is not approved never reaches the next Runner;
// Run then returns a *DeniedError. Every request, decision and run is
// appended to the audit log before Run returns.
//
// Closing the Gate withdraws pending requests and closes the next Runner,
// not the audit log.
type Gate struct {
	next     sandbox.Runner
	cfg      GateConfig
	broker   *Broker
	log      *slog.Logger
	approver Approver
}

var _ sandbox.Runner = (*Gate)(nil)

// NewGate wraps next.
func NewGate(next sandbox.Runner, cfg GateConfig) *Gate {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.WaitInterval <= 0 {
		cfg.WaitInterval = 5 * time.Second
	}
	g := &Gate{next: next, cfg: cfg, log: cfg.Logger}
	g.broker = NewBroker(g.recordDecision)
	g.approver = brokerApprover{g}
	return g
}

// Broker returns the pending requests that the console and CLI answer.
func (g *Gate) Broker() *Broker { return g.broker }

// Policy returns the policy in force.
func (g *Gate) Policy() Policy { return g.cfg.Policy }

// Timeout returns the approval timeout.
func (g *Gate) Timeout() time.Duration { return g.cfg.Timeout }

// OutOfBand reports whether the console and CLI answer requests.
func (g *Gate) OutOfBand() bool { return g.cfg.OutOfBand }

// Audit returns the audit log (nil when none).
func (g *Gate) Audit() *AuditLog { return g.cfg.Audit }

// Check runs the risk check on req and reports whether the policy requires
// a person's approval.
func (g *Gate) Check(req sandbox.Request) (bool, []Finding) {
	if g.cfg.Policy == PolicyNever {
		return false, nil
	}
	f := Assess(req.Language, req.Code)
	return g.cfg.Policy.Requires(f), f
}

// newAsk builds the Ask of req and records the request.
func (g *Gate) newAsk(ctx context.Context, req sandbox.Request, findings []Finding) (Ask, error) {
	now := time.Now().UTC()
	a := Ask{
		ID:         newID(),
		Language:   req.Language,
		Code:       req.Code,
		StdinBytes: len(req.Stdin),
		TimeoutMS:  req.Limits.Timeout.Milliseconds(),
		CodeSHA256: HashRequest(req),
		Reasons:    Reasons(findings),
		Requester:  RequesterFrom(ctx),
		Created:    now,
		Deadline:   now.Add(g.cfg.Timeout),
	}
	stdin, timeout := a.StdinBytes, a.TimeoutMS
	req2 := a.Requester
	err := g.cfg.Audit.Append(Entry{
		Event: EventRequest, ID: a.ID, CodeSHA256: a.CodeSHA256, Language: a.Language, Code: a.Code,
		StdinSize: &stdin, TimeoutMS: &timeout, Policy: g.cfg.Policy, Reasons: a.Reasons, Requester: &req2, Time: now,
	})
	if err != nil {
		g.log.Error("audit log", "err", err)
		return a, fmt.Errorf("%w: %v", ErrAudit, err)
	}
	return a, nil
}

// ErrAudit is wrapped when the audit log cannot be written. Nothing runs
// that could not be recorded.
var ErrAudit = errors.New("the audit log could not be written")

// Open records req and opens it on the Broker, to be decided through MCP
// elicitation (Decide) or on the console, whichever answers first. It
// returns the Ask with its id and deadline.
func (g *Gate) Open(ctx context.Context, req sandbox.Request, findings []Finding) (Ask, error) {
	a, err := g.newAsk(ctx, req, findings)
	if err != nil {
		return a, err
	}
	g.broker.Open(a)
	g.log.Info("approval requested", "id", a.ID, "language", a.Language, "reasons", len(a.Reasons), "requester", a.Requester.String(), "deadline", a.Deadline)
	return a, nil
}

// Decide answers a request opened with Open; the first answer wins and the
// standing decision is returned.
func (g *Gate) Decide(d Decision) (Decision, error) {
	final, err := g.broker.Decide(d)
	if errors.Is(err, ErrAlreadyDecided) {
		return final, nil
	}
	return final, err
}

// Reject records that an answer was rejected (forged, replayed or expired
// state) and returns the *DeniedError to give the client. id is the request
// the answer claimed to be for; "" records req as a new request first.
func (g *Gate) Reject(ctx context.Context, req sandbox.Request, id string, outcome Outcome, note string) error {
	hash := HashRequest(req)
	if id == "" {
		a, err := g.newAsk(ctx, req, Assess(req.Language, req.Code))
		if err != nil {
			return err
		}
		id = a.ID
	}
	d := Decision{ID: id, Outcome: outcome, By: "codeexec", Via: ViaServer, At: time.Now().UTC(), CodeSHA256: hash, Note: note}
	g.log.Warn("approval rejected", "id", id, "outcome", outcome, "note", note, "requester", RequesterFrom(ctx).String())
	if err := g.appendDecision(d); err != nil {
		return err
	}
	return &DeniedError{Decision: d}
}

func (g *Gate) appendDecision(d Decision) error {
	err := g.cfg.Audit.Append(Entry{Event: EventDecision, ID: d.ID, CodeSHA256: d.CodeSHA256, Outcome: d.Outcome, By: d.By, Via: d.Via, Note: d.Note, Time: d.At})
	if err != nil {
		g.log.Error("audit log", "err", err)
		return fmt.Errorf("%w: %v", ErrAudit, err)
	}
	return nil
}

// recordDecision is the Broker's hook.
func (g *Gate) recordDecision(a Ask, d Decision) {
	g.log.Info("approval decided", "id", a.ID, "outcome", d.Outcome, "by", d.By, "via", d.Via)
	_ = g.appendDecision(d)
}

// brokerApprover waits on the Gate's Broker.
type brokerApprover struct{ g *Gate }

func (b brokerApprover) Approve(ctx context.Context, a Ask) (Decision, error) {
	g := b.g
	g.broker.Open(a)
	g.log.Info("approval requested", "id", a.ID, "language", a.Language, "reasons", len(a.Reasons), "requester", a.Requester.String(), "deadline", a.Deadline)
	return g.Wait(ctx, a)
}

// Wait waits for the decision on a, calling the context's WaitFunc every
// few seconds. When ctx ends first the request is withdrawn.
func (g *Gate) Wait(ctx context.Context, a Ask) (Decision, error) {
	notify := waitFuncFrom(ctx)
	tick := time.NewTicker(g.cfg.WaitInterval)
	defer tick.Stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan Decision, 1)
	errc := make(chan error, 1)
	go func() {
		d, err := g.broker.Wait(wctx, a.ID)
		if err != nil {
			errc <- err
			return
		}
		res <- d
	}()
	for {
		if notify != nil {
			notify(a, time.Since(a.Created), time.Until(a.Deadline))
		}
		select {
		case d := <-res:
			return d, nil
		case err := <-errc:
			if ctx.Err() != nil {
				d, _ := g.broker.Decide(Decision{ID: a.ID, Outcome: OutcomeWithdrawn, By: "codeexec", Via: ViaClient, Note: "the client cancelled the call or went away"})
				return d, ctx.Err()
			}
			return Decision{}, err
		case <-tick.C:
		}
	}
}

// Run decides whether req may run (see Gate), runs it on the next Runner
// if so, and records the outcome.
func (g *Gate) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	hash := HashRequest(req)
	var d Decision
	if pre, ok := ctx.Value(decisionKey).(Decision); ok {
		if pre.CodeSHA256 != hash {
			return nil, g.Reject(ctx, req, pre.ID, OutcomeForged, "the decision was made for other code")
		}
		d = pre
	} else {
		required, findings := g.Check(req)
		a, err := g.newAsk(ctx, req, findings)
		if err != nil {
			return nil, err
		}
		switch {
		case !required:
			d = Decision{ID: a.ID, Outcome: OutcomeNotRequired, By: "codeexec", Via: ViaPolicy, At: time.Now().UTC(), CodeSHA256: hash, Note: "policy " + string(g.cfg.Policy)}
			if err := g.appendDecision(d); err != nil {
				return nil, err
			}
		case !g.cfg.OutOfBand:
			return nil, g.Reject(ctx, req, a.ID, OutcomeUnavailable, "no way to ask a person")
		default:
			d, err = g.approver.Approve(ctx, a)
			if err != nil {
				return nil, fmt.Errorf("waiting for approval: %w", err)
			}
		}
	}
	if !d.Outcome.Allows() {
		return nil, &DeniedError{Decision: d}
	}
	res, err := g.next.Run(ctx, req)
	e := Entry{Event: EventRun, ID: d.ID, CodeSHA256: hash}
	if res != nil {
		code, ms := res.ExitCode, float64(res.Duration.Microseconds())/1000
		e.ExitCode, e.DurationMS, e.LimitHit, e.Signal, e.Sandbox = &code, &ms, res.LimitHit(), res.Signal, string(res.Sandbox)
	}
	if e.Sandbox == "" {
		e.Sandbox = string(g.next.Capabilities().Mode)
	}
	if err != nil {
		e.Error = err.Error()
	}
	if aerr := g.cfg.Audit.Append(e); aerr != nil {
		g.log.Error("audit log", "err", aerr)
		return nil, fmt.Errorf("%w after the run: %v", ErrAudit, aerr)
	}
	return res, err
}

// Capabilities returns the next Runner's capabilities.
func (g *Gate) Capabilities() sandbox.Capabilities { return g.next.Capabilities() }

// Close withdraws pending requests and closes the next Runner.
func (g *Gate) Close() error {
	g.broker.Close()
	return g.next.Close()
}
