package approvals

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

type gateFixture struct {
	gate  *Gate
	runs  *atomic.Int32
	audit string
}

func newGate(t *testing.T, cfg GateConfig) gateFixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	runs := new(atomic.Int32)
	fake := &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			runs.Add(1)
			return &sandbox.Result{ExitCode: 0, Stdout: "ok\n", Sandbox: sandbox.ModeProcess, Duration: time.Millisecond}, nil
		},
	}
	cfg.Audit = log
	cfg.Logger = slog.New(slog.DiscardHandler)
	if cfg.WaitInterval == 0 {
		cfg.WaitInterval = 10 * time.Millisecond
	}
	g := NewGate(fake, cfg)
	t.Cleanup(func() { g.Close() })
	return gateFixture{gate: g, runs: runs, audit: path}
}

func (f gateFixture) auditText(t *testing.T) string {
	t.Helper()
	if _, err := VerifyFile(f.audit); err != nil {
		t.Fatalf("the audit log does not verify: %v", err)
	}
	b, _ := os.ReadFile(f.audit)
	return string(b)
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
			res, err := f.gate.Run(context.Background(), c.req)
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
			log := f.auditText(t)
			for _, want := range []string{`"event":"request"`, `"event":"decision"`, `"outcome":"` + string(c.wantOut) + `"`, HashRequest(c.req)} {
				if !strings.Contains(log, want) {
					t.Errorf("audit log lacks %s:\n%s", want, log)
				}
			}
			if hasRun := strings.Contains(log, `"event":"run"`); hasRun != c.wantRun {
				t.Errorf("audit run entry = %v, want %v", hasRun, c.wantRun)
			}
			if c.answer != "" && !strings.Contains(log, `"by":"alice","via":"console"`) {
				t.Errorf("audit log does not say who decided how:\n%s", log)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(decided) != 1 || decided[0] != c.wantOut {
				t.Errorf("OnDecision saw %v, want [%s]", decided, c.wantOut)
			}
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
	run := f.gate.For(Call{
		Requester: Requester{Client: "test 1.0", Session: "s1"},
		Waiting:   func(a Ask, waited_, left time.Duration) { waited <- struct{}{} },
	})
	errc := make(chan error, 1)
	go func() { _, err := run.Run(ctx, harmless); errc <- err }()
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
	if log := f.auditText(t); !strings.Contains(log, `"outcome":"withdrawn"`) || !strings.Contains(log, `"client":"test 1.0"`) {
		t.Fatalf("audit log does not record the requester and the withdrawal:\n%s", log)
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
		res, err := f.gate.For(Call{Requester: Requester{Client: "ide 2.0"}, Approver: elicit(OutcomeApproved)}).Run(context.Background(), risky)
		if err != nil || res.Stdout != "ok\n" || f.runs.Load() != 1 {
			t.Fatalf("Run = %+v, %v (runs %d)", res, err, f.runs.Load())
		}
		if log := f.auditText(t); !strings.Contains(log, `"outcome":"approved","by":"the user of ide 2.0","via":"elicitation"`) {
			t.Fatalf("audit log:\n%s", log)
		}
	})
	t.Run("declined", func(t *testing.T) {
		t.Parallel()
		f := newGate(t, GateConfig{Policy: PolicyRisky, Timeout: time.Minute})
		_, err := f.gate.For(Call{Requester: Requester{Client: "ide 2.0"}, Approver: elicit(OutcomeDenied)}).Run(context.Background(), risky)
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
		_, err := f.gate.For(Call{Approver: slow}).Run(context.Background(), harmless)
		var de *DeniedError
		if !errors.As(err, &de) || de.Decision.By != "alice" {
			t.Fatalf("Run = %v, want alice's denial", err)
		}
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Fatal("the approver was not told to stop once the console answered")
		}
	})
	t.Run("failed without a console", func(t *testing.T) {
		t.Parallel()
		f := newGate(t, GateConfig{Policy: PolicyAlways, Timeout: time.Minute})
		broken := approverFunc(func(ctx context.Context, a Ask) (Decision, error) {
			return Decision{}, errors.New("elicitation failed: the client hung up")
		})
		_, err := f.gate.For(Call{Approver: broken}).Run(context.Background(), harmless)
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
		_, err := f.gate.For(Call{Approver: later}).Run(context.Background(), req)
		var ir *InputRequiredError
		if !errors.As(err, &ir) || !errors.Is(err, ErrInputRequired) || errors.Is(err, ErrNotApproved) || ir.State == "" || ir.Ask.Code != req.Code {
			t.Fatalf("Run = %v, want an *InputRequiredError for this code", err)
		}
		return ir
	}
	approve := Decision{Outcome: OutcomeApproved, By: "the user of x", Via: ViaElicitation}
	retry := func(state string, req sandbox.Request, d Decision) error {
		_, err := f.gate.For(Call{Answer: &Answer{State: state, Decision: d}}).Run(context.Background(), req)
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
	log := f.auditText(t)
	for _, w := range []string{`"outcome":"replayed"`, `"outcome":"forged"`, `"outcome":"denied","by":"bob"`} {
		if !strings.Contains(log, w) {
			t.Errorf("audit log lacks %s", w)
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

// TestGateRecent: the Gate keeps what it records for the console, grouped
// by request, latest first, and a new Gate picks up the end of the audit
// log it is given.
func TestGateRecent(t *testing.T) {
	t.Parallel()
	f := newGate(t, GateConfig{Policy: PolicyRisky, Timeout: time.Minute, OutOfBand: true})
	if _, err := f.gate.Run(context.Background(), harmless); err != nil {
		t.Fatal(err)
	}
	answer(t, f.gate, OutcomeDenied)
	if _, err := f.gate.Run(context.Background(), risky); !errors.Is(err, ErrNotApproved) {
		t.Fatalf("risky run: %v", err)
	}
	recent := f.gate.Recent(10)
	if len(recent) != 2 {
		t.Fatalf("Recent = %+v, want 2 requests", recent)
	}
	denied, ran := recent[0], recent[1]
	if denied.Request == nil || denied.Request.Code != risky.Code || len(denied.Decisions) != 1 || denied.Decisions[0].Outcome != OutcomeDenied || denied.Decisions[0].By != "alice" || denied.Run != nil {
		t.Errorf("latest = %+v", denied)
	}
	if ran.Request == nil || len(ran.Decisions) != 1 || ran.Decisions[0].Outcome != OutcomeNotRequired || ran.Run == nil || ran.Run.ExitCode == nil || *ran.Run.ExitCode != 0 {
		t.Errorf("earlier = %+v", ran)
	}
	if got := f.gate.Recent(1); len(got) != 1 || got[0].ID != denied.ID {
		t.Errorf("Recent(1) = %+v", got)
	}

	// A Gate over the same log, reopened, shows the same.
	f.gate.Close()
	log, err := OpenAudit(f.audit)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	g := NewGate(&sandboxtest.Fake{}, GateConfig{Policy: PolicyRisky, Audit: log, Logger: slog.New(slog.DiscardHandler)})
	if again := g.Recent(10); len(again) != 2 || again[0].ID != denied.ID || again[1].Run == nil {
		t.Errorf("after reopening: %+v", again)
	}
}

func TestHistoryKeepsTheLatest(t *testing.T) {
	t.Parallel()
	h := newHistory(4)
	long := strings.Repeat("é", historyCodeBytes) // two bytes a rune
	h.add(Entry{ID: "a", Event: EventRequest, Code: long, Time: time.Unix(1, 0)})
	for i := range 5 {
		h.add(Entry{ID: string(rune('b' + i)), Event: EventRequest, Time: time.Unix(int64(2+i), 0)})
	}
	got := h.recent(10)
	if len(got) != 4 || got[0].ID != "f" || got[3].ID != "c" {
		t.Fatalf("recent = %+v, want f, e, d, c", got)
	}
	h2 := newHistory(4)
	h2.add(Entry{ID: "a", Event: EventRequest, Code: long})
	code := h2.recent(1)[0].Request.Code
	if len(code) > historyCodeBytes+100 || !utf8.ValidString(code) || !strings.Contains(code, "audit log has all of it") {
		t.Fatalf("kept code of %d bytes, valid UTF-8 %v", len(code), utf8.ValidString(code))
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
	if !strings.Contains(f.auditText(t), "would be refused anyway") {
		t.Errorf("the audit log does not record the note")
	}
}

// A call in a session is asked about and recorded with the session's name,
// and runs on the session's Runner, never on the Gate's own.
func TestGateRunsASessionCallOnItsRunner(t *testing.T) {
	f := newGate(t, GateConfig{Policy: PolicyAlways, OutOfBand: true})
	var inSession atomic.Int32
	sess := &sandboxtest.Fake{RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		inSession.Add(1)
		return &sandbox.Result{Stdout: "42\n", Sandbox: sandbox.ModeProcess}, nil
	}}
	var asked Ask
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var v uint64
		for ctx.Err() == nil {
			var asks []Ask
			asks, v = f.gate.Broker().Changes(ctx, v)
			if len(asks) > 0 {
				asked = asks[0]
				_, _ = f.gate.Broker().Decide(Decision{ID: asks[0].ID, Outcome: OutcomeApproved, By: "alice", Via: ViaConsole})
				return
			}
		}
	}()
	res, err := f.gate.For(Call{Session: "ses_0123", Next: sess}).Run(context.Background(), harmless)
	if err != nil || res.Stdout != "42\n" {
		t.Fatalf("Run: %v, %v", res, err)
	}
	if inSession.Load() != 1 || f.runs.Load() != 0 {
		t.Fatalf("%d runs in the session, %d on the Gate's runner; want 1 and 0", inSession.Load(), f.runs.Load())
	}
	if asked.Session != "ses_0123" {
		t.Errorf("the approver was asked about session %q, want ses_0123", asked.Session)
	}
	if n := strings.Count(f.auditText(t), `"session":"ses_0123"`); n != 2 {
		t.Errorf("the session is named in %d audit entries, want 2 (the request and the run):\n%s", n, f.auditText(t))
	}
}
