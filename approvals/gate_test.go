package approvals

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
			f := newGate(t, GateConfig{Policy: c.policy, Timeout: 300 * time.Millisecond, OutOfBand: true})
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
	ctx, cancel := context.WithCancel(WithRequester(context.Background(), Requester{Client: "test 1.0", Session: "s1"}))
	waited := make(chan struct{}, 100)
	ctx = WithWaitFunc(ctx, func(a Ask, waited_, left time.Duration) { waited <- struct{}{} })
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
	if log := f.auditText(t); !strings.Contains(log, `"outcome":"withdrawn"`) {
		t.Fatalf("audit log does not record the withdrawal:\n%s", log)
	}
}

func TestBrokerFirstAnswerWins(t *testing.T) {
	t.Parallel()
	f := newGate(t, GateConfig{Policy: PolicyAlways, Timeout: time.Minute, OutOfBand: true})
	a, err := f.gate.Open(context.Background(), harmless, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := f.gate.Decide(Decision{ID: a.ID, Outcome: OutcomeDenied, By: "bob", Via: ViaCLI})
	if err != nil || first.Outcome != OutcomeDenied {
		t.Fatalf("first answer: %+v, %v", first, err)
	}
	second, err := f.gate.Decide(Decision{ID: a.ID, Outcome: OutcomeApproved, By: "user", Via: ViaElicitation})
	if err != nil || second.Outcome != OutcomeDenied || second.By != "bob" {
		t.Fatalf("second answer changed the decision: %+v, %v", second, err)
	}
	if _, err := f.gate.Broker().Decide(Decision{ID: "nope", Outcome: OutcomeApproved}); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("unknown id: %v", err)
	}
	// A decision carried in the context for other code is rejected.
	ctx := WithDecision(context.Background(), Decision{ID: a.ID, Outcome: OutcomeApproved, CodeSHA256: HashRequest(harmless)})
	if _, err := f.gate.Run(ctx, risky); err == nil || f.runs.Load() != 0 {
		t.Fatalf("a decision for other code let risky code run: %v", err)
	}
	// And used for its own code it runs without asking again.
	if _, err := f.gate.Run(ctx, harmless); err != nil || f.runs.Load() != 1 {
		t.Fatalf("a decision for this code: %v", err)
	}
	if log := f.auditText(t); strings.Count(log, `"event":"decision"`) != 2 || !strings.Contains(log, `"outcome":"forged"`) {
		t.Fatalf("audit log:\n%s", log)
	}
}
