package approvals

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

type gateFixture struct {
	gate *Gate
	runs *atomic.Int32
	rec  *memoryRecord
}

// memoryRecord is a Recorder that keeps what a Gate records.
type memoryRecord struct {
	mu        sync.Mutex
	asks      []Ask
	policies  []Policy
	decisions []Decision
}

func (m *memoryRecord) Requested(a Ask, p Policy) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asks, m.policies = append(m.asks, a), append(m.policies, p)
	return nil
}

func (m *memoryRecord) Decided(d Decision) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.decisions = append(m.decisions, d)
	return nil
}

// requests returns the requests recorded so far.
func (m *memoryRecord) requests() []Ask {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Ask(nil), m.asks...)
}

// outcomes returns the decisions recorded so far, as "outcome by via".
func (m *memoryRecord) outcomes() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, d := range m.decisions {
		out = append(out, strings.TrimSpace(string(d.Outcome)+" "+d.By+" "+string(d.Via)))
	}
	return strings.Join(out, "; ")
}

// newGate is a Gate with cfg over a fake runner that counts its runs, whose
// record is kept in memory.
func newGate(t *testing.T, cfg GateConfig) gateFixture {
	t.Helper()
	runs := new(atomic.Int32)
	fake := &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			runs.Add(1)
			if _, ok := Decided(ctx); !ok {
				t.Error("the next Runner does not see the decision in its context")
			}
			return &sandbox.Result{ExitCode: 0, Stdout: "ok\n", Sandbox: sandbox.ModeProcess, Duration: time.Millisecond}, nil
		},
	}
	rec := &memoryRecord{}
	cfg.Record = rec
	cfg.Logger = slog.New(slog.DiscardHandler)
	if cfg.WaitInterval == 0 {
		cfg.WaitInterval = 10 * time.Millisecond
	}
	g := NewGate(fake, cfg)
	t.Cleanup(func() { g.Close() })
	return gateFixture{gate: g, runs: runs, rec: rec}
}

var (
	harmless = sandbox.Request{Language: "python", Code: "print(1)", Limits: sandbox.Limits{Timeout: time.Second}}
	risky    = sandbox.Request{Language: "python", Code: "import socket", Limits: sandbox.Limits{Timeout: time.Second}}
)

// answer decides the first pending request as soon as it appears.
func answer(t *testing.T, g *Gate, outcome Outcome) {
	t.Helper()
	go func() {
		var v uint64
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			var asks []Ask
			asks, v = g.Broker().Changes(ctx, v)
			if len(asks) > 0 {
				_, _ = g.Broker().Decide(Decision{ID: asks[0].ID, Outcome: outcome, By: "alice", Via: ViaConsole})
				return
			}
		}
	}()
}

// TestCallPolicy: a call's own policy (its principal's) replaces the
// Gate's, for that call only, and is the policy recorded; the requester's
// principal is shown and recorded with the request.
func TestCallPolicy(t *testing.T) {
	t.Parallel()
	f := newGate(t, GateConfig{Policy: PolicyNever, Timeout: time.Minute, OutOfBand: true})
	asker := Requester{Principal: "analytics-agent", Org: "acme", Client: "agent 1.0", Transport: "http"}
	answer(t, f.gate, OutcomeDenied)
	_, err := f.gate.Run(WithCall(context.Background(), Call{Requester: asker, Policy: PolicyAlways}), harmless)
	var denied *DeniedError
	if !errors.As(err, &denied) || f.runs.Load() != 0 {
		t.Fatalf("a call under the policy always, denied: %v, %d runs", err, f.runs.Load())
	}
	if _, err := f.gate.Run(WithCall(context.Background(), Call{Requester: Requester{Principal: "other"}}), risky); err != nil || f.runs.Load() != 1 {
		t.Fatalf("another call, under the Gate's policy never: %v, %d runs", err, f.runs.Load())
	}
	reqs := f.rec.requests()
	f.rec.mu.Lock()
	policies := append([]Policy(nil), f.rec.policies...)
	f.rec.mu.Unlock()
	if len(reqs) != 2 || reqs[0].Requester != asker || policies[0] != PolicyAlways || policies[1] != PolicyNever {
		t.Errorf("recorded %+v under %v", reqs, policies)
	}
	if got := asker.String(); got != "principal analytics-agent of acme, through agent 1.0 over http" {
		t.Errorf("the requester reads %q", got)
	}
}

func TestGatePolicies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		policy  Policy
		req     sandbox.Request
		answer  Outcome // "" answers nothing
		wantRun bool
		wantOut Outcome
	}{
		{"never runs risky code", PolicyNever, risky, "", true, OutcomeNotRequired},
		{"risky runs harmless code", PolicyRisky, harmless, "", true, OutcomeNotRequired},
		{"risky asks for risky code", PolicyRisky, risky, OutcomeApproved, true, OutcomeApproved},
		{"always asks for harmless code", PolicyAlways, harmless, OutcomeApproved, true, OutcomeApproved},
		{"denied", PolicyAlways, harmless, OutcomeDenied, false, OutcomeDenied},
		{"timeout denies", PolicyAlways, harmless, "", false, OutcomeTimedOut},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// On synctest's clock: the timeout fires only once nothing else
			// can happen, so a busy machine cannot let it win over an answer.
			synctest.Test(t, func(t *testing.T) {
				var decided []Outcome
				var mu sync.Mutex
				f := newGate(t, GateConfig{Policy: c.policy, Timeout: 300 * time.Millisecond, OutOfBand: true, OnDecision: func(d Decision) {
					mu.Lock()
					decided = append(decided, d.Outcome)
					mu.Unlock()
				}})
				if c.answer != "" {
					answer(t, f.gate, c.answer)
				}
				start := time.Now()
				res, err := f.gate.Run(context.Background(), c.req)
				if took := time.Since(start); c.wantOut == OutcomeTimedOut && took != 300*time.Millisecond {
					t.Errorf("the request was decided %v after it was asked, want at its 300ms timeout", took)
				} else if c.wantOut != OutcomeTimedOut && took != 0 {
					t.Errorf("the request was decided %v after it was asked, want at once", took)
				}
				if ran := f.runs.Load() == 1; ran != c.wantRun {
					t.Fatalf("ran = %v, want %v (err %v)", ran, c.wantRun, err)
				}
				if c.wantRun {
					if err != nil || res == nil || res.Stdout != "ok\n" {
						t.Fatalf("Run = %+v, %v", res, err)
					}
				} else {
					var de *DeniedError
					if !errors.As(err, &de) || !errors.Is(err, ErrNotApproved) || de.Decision.Outcome != c.wantOut {
						t.Fatalf("Run error = %v, want a DeniedError %s", err, c.wantOut)
					}
					if s := de.Sentence(); !strings.HasPrefix(s, "The code did not run") || strings.Count(s, ". ") > 0 {
						t.Errorf("Sentence() = %q: want one sentence saying the code did not run", s)
					}
				}
				if asks := f.rec.requests(); len(asks) != 1 || asks[0].CodeSHA256 != HashRequest(c.req) || f.rec.policies[0] != c.policy {
					t.Errorf("recorded requests %+v, want this one under policy %s", asks, c.policy)
				}
				if got := f.rec.outcomes(); !strings.HasPrefix(got, string(c.wantOut)) || strings.Contains(got, ";") {
					t.Errorf("recorded decisions %q, want one %s", got, c.wantOut)
				}
				if c.answer != "" && !strings.Contains(f.rec.outcomes(), "alice console") {
					t.Errorf("the record does not say who decided how: %q", f.rec.outcomes())
				}
				mu.Lock()
				defer mu.Unlock()
				if len(decided) != 1 || decided[0] != c.wantOut {
					t.Errorf("OnDecision saw %v, want [%s]", decided, c.wantOut)
				}
			})

		})
	}
}

func TestGateWithoutOutOfBandIsUnavailable(t *testing.T) {
	t.Parallel()
	f := newGate(t, GateConfig{Policy: PolicyAlways, Timeout: time.Minute})
	_, err := f.gate.Run(context.Background(), harmless)
	var de *DeniedError
	if !errors.As(err, &de) || de.Decision.Outcome != OutcomeUnavailable || f.runs.Load() != 0 {
		t.Fatalf("Run = %v (runs %d), want unavailable and no run", err, f.runs.Load())
	}
}

func TestGateWithdrawsWhenTheClientLeaves(t *testing.T) {
	t.Parallel()
	f := newGate(t, GateConfig{Policy: PolicyAlways, Timeout: time.Minute, OutOfBand: true})
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan struct{}, 100)
	ctx = WithCall(ctx, Call{
		Requester: Requester{Client: "test 1.0", Session: "s1"},
		Waiting:   func(a Ask, waited_, left time.Duration) { waited <- struct{}{} },
	})
	errc := make(chan error, 1)
	go func() { _, err := f.gate.Run(ctx, harmless); errc <- err }()
	<-waited
	asks, _ := f.gate.Broker().Pending()
	if len(asks) != 1 || asks[0].Requester.Client != "test 1.0" || asks[0].Code != harmless.Code {
		t.Fatalf("pending = %+v", asks)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if asks, _ := f.gate.Broker().Pending(); len(asks) != 0 {
		t.Fatalf("the request is still pending after its client left: %+v", asks)
	}
	if asks := f.rec.requests(); len(asks) != 1 || asks[0].Requester.Client != "test 1.0" || !strings.HasPrefix(f.rec.outcomes(), "withdrawn") {
		t.Fatalf("the record does not keep the requester and the withdrawal: %+v, %q", asks, f.rec.outcomes())
	}
}

// approverFunc is an Approver made of a function.
type approverFunc func(ctx context.Context, a Ask) (Decision, error)

func (f approverFunc) Approve(ctx context.Context, a Ask) (Decision, error) { return f(ctx, a) }

// TestGateAsksTheCallsApprover: the call's Approver is asked; its answer
// lets the code run or not, and the console can answer first.
func TestGateAsksTheCallsApprover(t *testing.T) {
	t.Parallel()
	elicit := func(o Outcome) Approver {
		return approverFunc(func(ctx context.Context, a Ask) (Decision, error) {
			if a.Requester.Client != "ide 2.0" || a.Code != risky.Code || len(a.Reasons) == 0 {
				t.Errorf("the approver was shown %+v", a)
			}
			return Decision{Outcome: o, By: "the user of ide 2.0", Via: ViaElicitation}, nil
		})
	}
	t.Run("approved", func(t *testing.T) {
		t.Parallel()
		f := newGate(t, GateConfig{Policy: PolicyRisky, Timeout: time.Minute})
		res, err := f.gate.Run(WithCall(context.Background(), Call{Requester: Requester{Client: "ide 2.0"}, Approver: elicit(OutcomeApproved)}), risky)
		if err != nil || res.Stdout != "ok\n" || f.runs.Load() != 1 {
			t.Fatalf("Run = %+v, %v (runs %d)", res, err, f.runs.Load())
		}
		if got := f.rec.outcomes(); got != "approved the user of ide 2.0 elicitation" {
			t.Fatalf("recorded decisions %q", got)
		}
	})
	t.Run("declined", func(t *testing.T) {
		t.Parallel()
		f := newGate(t, GateConfig{Policy: PolicyRisky, Timeout: time.Minute})
		_, err := f.gate.Run(WithCall(context.Background(), Call{Requester: Requester{Client: "ide 2.0"}, Approver: elicit(OutcomeDenied)}), risky)
		var de *DeniedError
		if !errors.As(err, &de) || de.Decision.Outcome != OutcomeDenied || f.runs.Load() != 0 {
			t.Fatalf("Run = %v (runs %d), want denied", err, f.runs.Load())
		}
	})
	t.Run("the console answers first", func(t *testing.T) {
		t.Parallel()
		f := newGate(t, GateConfig{Policy: PolicyAlways, Timeout: time.Minute, OutOfBand: true})
		stopped := make(chan struct{})
		slow := approverFunc(func(ctx context.Context, a Ask) (Decision, error) {
			<-ctx.Done()
			close(stopped)
			return Decision{}, ctx.Err()
		})
		answer(t, f.gate, OutcomeDenied)
		_, err := f.gate.Run(WithCall(context.Background(), Call{Approver: slow}), harmless)
		var de *DeniedError
		if !errors.As(err, &de) || de.Decision.By != "alice" {
			t.Fatalf("Run = %v, want alice's denial", err)
		}
		select {
		case <-stopped:
		case <-time.After(time.Minute): // bounds a hang only
			t.Fatal("the approver was not told to stop once the console answered")
		}
	})
	t.Run("failed without a console", func(t *testing.T) {
		t.Parallel()
		f := newGate(t, GateConfig{Policy: PolicyAlways, Timeout: time.Minute})
		broken := approverFunc(func(ctx context.Context, a Ask) (Decision, error) {
			return Decision{}, errors.New("elicitation failed: the client hung up")
		})
		_, err := f.gate.Run(WithCall(context.Background(), Call{Approver: broken}), harmless)
		var de *DeniedError
		if !errors.As(err, &de) || de.Decision.Outcome != OutcomeUnavailable || !strings.Contains(de.Decision.Note, "the client hung up") {
			t.Fatalf("Run = %v, want unavailable with the reason", err)
		}
	})
}

// TestGateInputRequired: an Approver that hands the question to the client
// makes Run return an *InputRequiredError; the answer that comes back with
// its state is bound to the code, good once, and cannot be made up.
func TestGateInputRequired(t *testing.T) {
	t.Parallel()
	f := newGate(t, GateConfig{Policy: PolicyAlways, Timeout: time.Minute})
	later := approverFunc(func(ctx context.Context, a Ask) (Decision, error) { return Decision{}, ErrInputRequired })
	ask := func(req sandbox.Request) *InputRequiredError {
		t.Helper()
		_, err := f.gate.Run(WithCall(context.Background(), Call{Approver: later}), req)
		var ir *InputRequiredError
		if !errors.As(err, &ir) || !errors.Is(err, ErrInputRequired) || errors.Is(err, ErrNotApproved) || ir.State == "" || ir.Ask.Code != req.Code {
			t.Fatalf("Run = %v, want an *InputRequiredError for this code", err)
		}
		return ir
	}
	approve := Decision{Outcome: OutcomeApproved, By: "the user of x", Via: ViaElicitation}
	retry := func(state string, req sandbox.Request, d Decision) error {
		_, err := f.gate.Run(WithCall(context.Background(), Call{Answer: &Answer{State: state, Decision: d}}), req)
		return err
	}
	outcome := func(err error) Outcome {
		var de *DeniedError
		if !errors.As(err, &de) {
			t.Fatalf("error %v is not a denial", err)
		}
		return de.Decision.Outcome
	}

	ir := ask(harmless)
	if f.runs.Load() != 0 {
		t.Fatal("the code ran before anyone answered")
	}
	if err := retry(ir.State, harmless, approve); err != nil || f.runs.Load() != 1 {
		t.Fatalf("approved retry: %v (runs %d)", err, f.runs.Load())
	}
	if o := outcome(retry(ir.State, harmless, approve)); o != OutcomeReplayed {
		t.Fatalf("replayed state: %s", o)
	}
	if o := outcome(retry(ask(harmless).State, risky, approve)); o != OutcomeForged {
		t.Fatalf("state for other code: %s", o)
	}
	if o := outcome(retry("", harmless, approve)); o != OutcomeForged {
		t.Fatalf("no state: %s", o)
	}
	if o := outcome(retry(ask(harmless).State, harmless, Decision{Outcome: OutcomeDenied, Via: ViaElicitation})); o != OutcomeDenied {
		t.Fatalf("declined: %s", o)
	}
	// The console may answer before the client comes back: the first answer stands.
	ir = ask(harmless)
	if _, err := f.gate.Broker().Decide(Decision{ID: ir.Ask.ID, Outcome: OutcomeDenied, By: "bob", Via: ViaCLI}); err != nil {
		t.Fatal(err)
	}
	if err := retry(ir.State, harmless, approve); outcome(err) != OutcomeDenied {
		t.Fatalf("the client's approval overrode the console's denial: %v", err)
	}
	if f.runs.Load() != 1 {
		t.Fatalf("runs = %d, want exactly 1", f.runs.Load())
	}
	log := f.rec.outcomes()
	for _, w := range []string{"replayed", "forged", "denied bob cli"} {
		if !strings.Contains(log, w) {
			t.Errorf("the recorded decisions lack %s: %q", w, log)
		}
	}
}

func TestBrokerFirstAnswerWins(t *testing.T) {
	t.Parallel()
	b := NewBroker(nil)
	a := Ask{ID: "r1", CodeSHA256: "h", Deadline: time.Now().Add(time.Minute)}
	b.Open(a)
	first, err := b.Decide(Decision{ID: a.ID, Outcome: OutcomeDenied, By: "bob", Via: ViaCLI})
	if err != nil || first.Outcome != OutcomeDenied || first.CodeSHA256 != "h" {
		t.Fatalf("first answer: %+v, %v", first, err)
	}
	second, err := b.Decide(Decision{ID: a.ID, Outcome: OutcomeApproved, By: "user", Via: ViaElicitation})
	if !errors.Is(err, ErrAlreadyDecided) || second.Outcome != OutcomeDenied || second.By != "bob" {
		t.Fatalf("second answer changed the decision: %+v, %v", second, err)
	}
	if _, err := b.Decide(Decision{ID: "nope", Outcome: OutcomeApproved}); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("unknown id: %v", err)
	}
}

// TestRiskCheckNotes: a RiskCheck's note that the code will be refused
// anyway reaches the approver with the risk check's own reasons, and alone
// does not make the run wait for a person.
func TestRiskCheckNotes(t *testing.T) {
	t.Parallel()
	check := func(language, code string) []Finding {
		return append(Assess(language, code), Refused(1, `imports "socket", which is not among the allowed imports`))
	}
	f := newGate(t, GateConfig{Policy: PolicyRisky, OutOfBand: true, RiskCheck: check})
	if _, err := f.gate.Run(context.Background(), harmless); err != nil || f.runs.Load() != 1 {
		t.Fatalf("a run with only a refusal note waited or failed: err=%v runs=%d", err, f.runs.Load())
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var v uint64
		for ctx.Err() == nil {
			var asks []Ask
			asks, v = f.gate.Broker().Changes(ctx, v)
			if len(asks) == 0 {
				continue
			}
			outcome := OutcomeDenied
			if len(asks[0].Reasons) == 2 && strings.Contains(asks[0].Reasons[1], "would be refused anyway by the restricted Python policy") {
				outcome = OutcomeApproved
			}
			_, _ = f.gate.Broker().Decide(Decision{ID: asks[0].ID, Outcome: outcome, By: "alice", Via: ViaConsole})
			return
		}
	}()
	if _, err := f.gate.Run(context.Background(), risky); err != nil {
		t.Fatalf("the approver did not see the network reason and the refusal note: %v", err)
	}
	if asks := f.rec.requests(); len(asks) != 2 || !strings.Contains(strings.Join(asks[1].Reasons, "\n"), "would be refused anyway") {
		t.Errorf("the record does not keep the note: %+v", asks)
	}
}

// A call in a session is asked about and recorded with the session's
// name, and goes on to the next Runner (the session router's) as it came.
func TestGateNamesTheSession(t *testing.T) {
	t.Parallel()
	f := newGate(t, GateConfig{Policy: PolicyAlways, OutOfBand: true})
	answer(t, f.gate, OutcomeApproved)
	req := harmless
	req.Session = "ses_0123"
	if _, err := f.gate.Run(context.Background(), req); err != nil || f.runs.Load() != 1 {
		t.Fatalf("Run: %v (runs %d)", err, f.runs.Load())
	}
	if asks := f.rec.requests(); len(asks) != 1 || asks[0].Session != "ses_0123" {
		t.Errorf("the request recorded and asked about is %+v, want session ses_0123", asks)
	}
}

// A request that creates a session is asked about as one (Action), with
// its packages.
func TestGateAsksAboutASessionsCreation(t *testing.T) {
	t.Parallel()
	f := newGate(t, GateConfig{Policy: PolicyAlways, OutOfBand: true})
	answer(t, f.gate, OutcomeApproved)
	req := sandbox.Request{Language: "python", Packages: []string{"requests==2.31.0"}, NewSession: &sandbox.NewSession{}}
	if _, err := f.gate.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if asks := f.rec.requests(); len(asks) != 1 || asks[0].Action != ActionSessionCreate || len(asks[0].Packages) != 1 {
		t.Errorf("the request recorded and asked about is %+v, want a session's creation with its packages", asks)
	}
}
