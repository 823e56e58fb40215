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
// the person answers or ctx ends (then it returns ctx's error); the Gate
// cancels ctx when the request is decided elsewhere first. The Decision's
// ID, At and CodeSHA256 are filled in by the Gate.
//
// An Approver that cannot wait for the answer within the call returns
// ErrInputRequired at once: the question then goes back to the client with
// the call's result, and the answer comes with a later call (Call.Answer).
// Any other error means the person could not be asked; the request then
// waits for the approvals console and CLI, if they are served.
type Approver interface {
	Approve(ctx context.Context, a Ask) (Decision, error)
}

// ErrInputRequired is returned by an Approver that hands the question to
// the client (MCP multi-round-trip requests, protocol 2026-07-28), and is
// wrapped by the *InputRequiredError that Run then returns.
var ErrInputRequired = errors.New("approval input required from the client")

// InputRequiredError is what a Gate's Run returns, instead of running, when
// the call's Approver handed the question to the client: the code did not
// run, the request stays pending (on the Broker, until its deadline), and
// the client is to show Ask to a person and call again with the answer and
// State (see Answer). It is not a denial.
type InputRequiredError struct {
	Ask Ask
	// State is the signed state that must come back with the answer: it
	// binds the answer to this request and this exact code, once, until
	// the deadline.
	State string
}

func (e *InputRequiredError) Error() string {
	return "approval of request " + e.Ask.ID + " is asked of the client"
}

// Unwrap lets errors.Is(err, ErrInputRequired) hold.
func (e *InputRequiredError) Unwrap() error { return ErrInputRequired }

// Answer is a person's answer that came back with a call, to a question a
// Gate handed to the client before (InputRequiredError).
type Answer struct {
	// State is the InputRequiredError's State, as the client sent it back.
	State string
	// Decision is the answer: Outcome, By, Via and Note. Its ID and
	// CodeSHA256 come from State.
	Decision Decision
}

// WaitFunc is called while a run waits for a person: at once, then every
// few seconds, with what is waiting and how long is left.
type WaitFunc func(a Ask, waited, left time.Duration)

// Call is who asks for a request and how to ask the person behind them:
// what a Gate is told about one call besides its sandbox.Request. The MCP
// server puts one in the context of each tool call (WithCall); the zero
// Call names no requester and asks only on the Broker.
type Call struct {
	// Requester says who asks: it is shown to the approver and recorded.
	Requester Requester
	// Approver, if not nil, asks the person behind the client while the
	// request also waits on the Broker (the approvals console and CLI);
	// the first answer wins.
	Approver Approver
	// Answer, if not nil, is an answer to an earlier question that came
	// back with this call; the Gate checks its State and asks nobody.
	Answer *Answer
	// Waiting, if not nil, is called while the run waits for a person.
	Waiting WaitFunc
	// Policy, if not empty, is the approval policy of this requester (its
	// principal's), in place of the Gate's.
	Policy Policy
}

type callKey struct{}

// WithCall returns ctx carrying c, which a Gate (and the audit record)
// read with CallFrom.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the Call that ctx carries (the zero Call if none).
func CallFrom(ctx context.Context) Call {
	c, _ := ctx.Value(callKey{}).(Call)
	return c
}

type decisionKey struct{}

// Decided returns the decision that let the request of ctx through a Gate,
// for the Runners after it (the audit record files the run under its ID);
// false when no Gate decided on it.
func Decided(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}

// WithDecided returns ctx carrying d, the decision (or, without a Gate,
// the record) that a request went on under, for Decided: the audit
// record uses it for a request that no Gate decided on, so that the
// Runners after it (the run token) know the request's ID.
func WithDecided(ctx context.Context, d Decision) context.Context {
	return context.WithValue(ctx, decisionKey{}, d)
}

// Recorder keeps the record of what a Gate decides (approvals/audit
// implements it): Requested before a request is decided, with the policy
// in force, and Decided for every decision, the console's and the
// timeouts' included. A Gate runs nothing it could not record: an error of
// either stops the request.
type Recorder interface {
	Requested(a Ask, p Policy) error
	Decided(d Decision) error
}

// GateConfig configures a Gate.
type GateConfig struct {
	// IDPrefix starts every request id (the replica's id and a dot, where
	// replicas stand behind one address; see server/replicas).
	IDPrefix string
	// Key signs the approval state that clients carry back (Signer); the
	// same key on every replica lets each check another's. Empty means a
	// random key.
	Key []byte
	// Policy says which runs need approval.
	Policy Policy
	// Timeout is how long a request waits for a person before it is denied.
	Timeout time.Duration
	// Record keeps the record of every request and decision; nil keeps
	// none.
	Record Recorder
	// OutOfBand reports whether people answer on the approvals console or
	// CLI (the Gate's Broker). Without it, a run that needs approval and
	// whose Call has no Approver is denied OutcomeUnavailable.
	OutOfBand bool
	// RiskCheck, if not nil, replaces Assess as the risk check: it lets the
	// server add findings of its own, such as a language policy's note
	// that the code will be refused anyway (CategoryRefused).
	RiskCheck func(language, code string) []Finding
	// WaitInterval is how often a waiting run's WaitFunc is called (5s if 0).
	WaitInterval time.Duration
	Logger       *slog.Logger
	// OnDecision, if set, sees every decision as it is recorded (for
	// metrics); it must not block.
	OnDecision func(Decision)
}

// Gate is a sandbox.Runner that asks before it runs: when its Policy
// requires approval for a request, the request waits (before it takes a run
// slot in the Runner it wraps) for a person's decision, given on the Gate's
// Broker or through the Approver of the request's Call (see WithCall),
// whichever answers first. Code that is not approved never reaches the next
// Runner; Run then returns a *DeniedError (or an *InputRequiredError when
// the question went back to the client). Every request and decision is
// recorded (GateConfig.Record) before the request goes on; the next Runner
// finds the decision in its context (Decided).
//
// Closing the Gate withdraws pending requests and closes the next Runner.
type Gate struct {
	next   sandbox.Runner
	cfg    GateConfig
	broker *Broker
	signer *Signer
	log    *slog.Logger
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
	if cfg.RiskCheck == nil {
		cfg.RiskCheck = Assess
	}
	g := &Gate{next: next, cfg: cfg, log: cfg.Logger, signer: NewSigner(cfg.Key)}
	g.broker = NewBroker(g.recordDecision)
	return g
}

// Broker returns the pending requests that the console and CLI answer.
func (g *Gate) Broker() *Broker { return g.broker }

// Policy returns the policy in force.
func (g *Gate) Policy() Policy { return g.cfg.Policy }

// Timeout returns the approval timeout.
func (g *Gate) Timeout() time.Duration { return g.cfg.Timeout }

// Run decides whether req may run, asking as the Call in ctx says, and
// runs it on the next Runner if so.
func (g *Gate) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	d, err := g.decide(ctx, req, CallFrom(ctx))
	if err != nil {
		return nil, err
	}
	return g.next.Run(WithDecided(ctx, d), req)
}

// Capabilities returns the next Runner's capabilities.
func (g *Gate) Capabilities() sandbox.Capabilities { return g.next.Capabilities() }

// Close withdraws pending requests and closes the next Runner.
func (g *Gate) Close() error {
	g.broker.Close()
	return g.next.Close()
}

// riskCheck is the configured risk check of the code and, when runs reach
// the network through an allowlist, which destinations the code names that
// the allowlist would refuse; then the risk check of the request's files
// and stdin (AssessInputs).
func (g *Gate) riskCheck(req sandbox.Request) []Finding {
	f := g.cfg.RiskCheck(req.Language, req.Code)
	if p := g.next.Capabilities().Egress; p != nil {
		f = append(f, AllowlistFindings(req.Code, p)...)
		sortFindings(f)
	}
	return append(f, AssessInputs(req.Files, req.Stdin)...)
}

// decide returns the decision that lets req run, or the error that stops
// it (a *DeniedError, an *InputRequiredError, or the Recorder's error).
func (g *Gate) decide(ctx context.Context, req sandbox.Request, c Call) (Decision, error) {
	hash := HashRequest(req)
	policy := g.cfg.Policy
	if c.Policy != "" {
		policy = c.Policy
	}
	var d Decision
	if c.Answer != nil {
		var err error
		if d, err = g.redeem(req, hash, c); err != nil {
			return Decision{}, err
		}
	} else {
		var findings []Finding
		if policy != PolicyNever {
			findings = g.riskCheck(req)
		}
		a, err := g.newAsk(req, c.Requester, findings, policy)
		if err != nil {
			return Decision{}, err
		}
		switch {
		case !policy.Requires(findings):
			d = Decision{ID: a.ID, Outcome: OutcomeNotRequired, By: "codeexec", Via: ViaPolicy, At: time.Now().UTC(), CodeSHA256: hash, Note: "policy " + string(policy)}
			if err := g.appendDecision(d); err != nil {
				return Decision{}, err
			}
		case c.Approver == nil && !g.cfg.OutOfBand:
			return Decision{}, g.reject(req, c, a.ID, OutcomeUnavailable, "no way to ask a person")
		default:
			if d, err = g.ask(ctx, a, c); err != nil {
				return Decision{}, err
			}
		}
	}
	if !d.Outcome.Allows() {
		return Decision{}, &DeniedError{Decision: d}
	}
	return d, nil
}

// newAsk builds the Ask of req and records the request, under policy.
func (g *Gate) newAsk(req sandbox.Request, requester Requester, findings []Finding, policy Policy) (Ask, error) {
	a := Describe(req, requester, g.next.Capabilities())
	a.ID = g.cfg.IDPrefix + a.ID
	a.Reasons = Reasons(findings)
	a.Deadline = a.Created.Add(g.cfg.Timeout)
	if g.cfg.Record == nil {
		return a, nil
	}
	if err := g.cfg.Record.Requested(a, policy); err != nil {
		g.log.Error("audit log", "err", err)
		return a, err
	}
	return a, nil
}

// ask opens a on the Broker and waits for the first answer: from the
// console or CLI, from the call's Approver, or the timeout. When ctx ends
// first the request is withdrawn.
func (g *Gate) ask(ctx context.Context, a Ask, c Call) (Decision, error) {
	g.broker.Open(a)
	g.log.Info("approval requested", "id", a.ID, "language", a.Language, "reasons", len(a.Reasons), "requester", a.Requester.String(), "deadline", a.Deadline)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		d   Decision
		err error
	}
	var fromClient chan answer
	if c.Approver != nil {
		fromClient = make(chan answer, 1)
		go func() {
			d, err := c.Approver.Approve(wctx, a)
			fromClient <- answer{d, err}
		}()
	}
	decided := make(chan answer, 1)
	go func() {
		d, err := g.broker.Wait(wctx, a.ID)
		decided <- answer{d, err}
	}()

	tick := time.NewTicker(g.cfg.WaitInterval)
	defer tick.Stop()
	if c.Waiting != nil {
		c.Waiting(a, time.Since(a.Created), time.Until(a.Deadline))
	}
	for {
		select {
		case r := <-decided:
			if r.err == nil {
				return r.d, nil
			}
			if ctx.Err() != nil {
				d, _ := g.broker.Decide(Decision{ID: a.ID, Outcome: OutcomeWithdrawn, By: "codeexec", Via: ViaClient, Note: "the client cancelled the call or went away"})
				return d, fmt.Errorf("waiting for approval: %w", ctx.Err())
			}
			return Decision{}, fmt.Errorf("waiting for approval: %w", r.err)
		case r := <-fromClient:
			fromClient = nil
			switch {
			case errors.Is(r.err, ErrInputRequired):
				return Decision{}, &InputRequiredError{Ask: a, State: g.signer.Issue(a.ID, a.CodeSHA256, a.Deadline)}
			case r.err != nil && wctx.Err() != nil:
				// The call ended: the Broker's answer says how.
			case r.err != nil:
				g.log.Warn("asking through the client failed; waiting for the console", "id", a.ID, "err", r.err)
				if !g.cfg.OutOfBand {
					_, _ = g.broker.Decide(Decision{ID: a.ID, Outcome: OutcomeUnavailable, By: "codeexec", Via: ViaServer, Note: r.err.Error()})
				}
			default:
				// The first answer wins; the Broker hands the standing
				// decision to the wait above.
				r.d.ID = a.ID
				_, _ = g.broker.Decide(r.d)
			}
		case <-tick.C:
			if c.Waiting != nil {
				c.Waiting(a, time.Since(a.Created), time.Until(a.Deadline))
			}
		}
	}
}

// redeem checks an answer that came with a call: its state must have been
// issued by this Gate for exactly req, be used once, and be in time. It
// returns the decision that stands for the request (the first answer
// wins), or the error that rejects the answer.
func (g *Gate) redeem(req sandbox.Request, hash string, c Call) (Decision, error) {
	id, verdict := g.signer.Redeem(c.Answer.State, hash)
	if verdict != OutcomeApproved {
		note := map[Outcome]string{
			OutcomeForged:   "the approval state was not issued by this server for these arguments",
			OutcomeReplayed: "the approval state was used before",
			OutcomeExpired:  "the approval state expired",
		}[verdict]
		if verdict == OutcomeForged {
			id = "" // issued for other code, or not at all: record this request on its own
		}
		return Decision{}, g.reject(req, c, id, verdict, note)
	}
	d := c.Answer.Decision
	d.ID = id
	final, err := g.broker.Decide(d)
	switch {
	case errors.Is(err, ErrAlreadyDecided):
		// The first answer stands.
	case errors.Is(err, ErrUnknownRequest):
		return Decision{}, g.reject(req, c, id, OutcomeExpired, "the request is no longer pending")
	case err != nil:
		return Decision{}, err
	}
	if final.CodeSHA256 != hash {
		return Decision{}, g.reject(req, c, id, OutcomeForged, "the decision was made for other code")
	}
	return final, nil
}

// reject records that an answer was rejected (forged, replayed or expired
// state) or that nobody can be asked, and returns the *DeniedError to give
// the client of call c. id is the request it is about; "" records req as a
// new request first.
func (g *Gate) reject(req sandbox.Request, c Call, id string, outcome Outcome, note string) error {
	requester := c.Requester
	if id == "" {
		policy := g.cfg.Policy
		if c.Policy != "" {
			policy = c.Policy
		}
		a, err := g.newAsk(req, requester, g.riskCheck(req), policy)
		if err != nil {
			return err
		}
		id = a.ID
	}
	d := Decision{ID: id, Outcome: outcome, By: "codeexec", Via: ViaServer, At: time.Now().UTC(), CodeSHA256: HashRequest(req), Note: note}
	g.log.Warn("approval rejected", "id", id, "outcome", outcome, "note", note, "requester", requester.String())
	if err := g.appendDecision(d); err != nil {
		return err
	}
	return &DeniedError{Decision: d}
}

func (g *Gate) appendDecision(d Decision) error {
	if g.cfg.OnDecision != nil {
		g.cfg.OnDecision(d)
	}
	if g.cfg.Record == nil {
		return nil
	}
	if err := g.cfg.Record.Decided(d); err != nil {
		g.log.Error("audit log", "err", err)
		return err
	}
	return nil
}

// recordDecision is the Broker's hook.
func (g *Gate) recordDecision(a Ask, d Decision) {
	g.log.Info("approval decided", "id", a.ID, "outcome", d.Outcome, "by", d.By, "via", d.Via)
	_ = g.appendDecision(d)
}
