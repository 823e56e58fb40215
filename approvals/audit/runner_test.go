package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// chain is the approvals and audit layers as cmd/codeexec builds them, over
// a fake runner: a Gate (unless the policy is "") in front of the audit
// Runner, which is the Gate's Recorder.
type chain struct {
	runner sandbox.Runner
	gate   *approvals.Gate
	log    *Log
	path   string
	runs   *atomic.Int32
}

func newChain(t *testing.T, policy approvals.Policy, caps sandbox.Capabilities, res *sandbox.Result) chain {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	runs := new(atomic.Int32)
	if caps.Mode == "" {
		caps.Mode = sandbox.ModeProcess
	}
	if res == nil {
		res = &sandbox.Result{Stdout: "ok\n", Sandbox: caps.Mode, Duration: time.Millisecond}
	}
	fake := &sandboxtest.Fake{Caps: caps, RunFunc: func(context.Context, sandbox.Request) (*sandbox.Result, error) {
		runs.Add(1)
		return res, nil
	}}
	rec := Wrap(fake, log, slog.New(slog.DiscardHandler))
	c := chain{runner: rec, log: log, path: path, runs: runs}
	if policy != "" {
		c.gate = approvals.NewGate(rec, approvals.GateConfig{Policy: policy, Timeout: time.Minute, OutOfBand: true, Record: rec,
			WaitInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(func() { c.gate.Close() })
		c.runner = c.gate
	}
	return c
}

// answer decides the first pending request of g as soon as it appears.
func answer(g *approvals.Gate, outcome approvals.Outcome) {
	go func() {
		var v uint64
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			var asks []approvals.Ask
			asks, v = g.Broker().Changes(ctx, v)
			if len(asks) > 0 {
				_, _ = g.Broker().Decide(approvals.Decision{ID: asks[0].ID, Outcome: outcome, By: "alice", Via: approvals.ViaConsole})
				return
			}
		}
	}()
}

// entries reads the log after checking its chain.
func (c chain) entries(t *testing.T) ([]Entry, string) {
	t.Helper()
	if _, err := VerifyFile(c.path); err != nil {
		t.Fatalf("the audit log does not verify: %v", err)
	}
	b, err := os.ReadFile(c.path)
	if err != nil {
		t.Fatal(err)
	}
	var out []Entry
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out, string(b)
}

// events lists the entries as "event/outcome" (outcome for decisions).
func events(es []Entry) string {
	var out []string
	for _, e := range es {
		s := string(e.Event)
		if e.Outcome != "" {
			s += "/" + string(e.Outcome)
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

var (
	harmless = sandbox.Request{Language: "python", Code: "print(1)", Limits: sandbox.Limits{Timeout: time.Second}}
	risky    = sandbox.Request{Language: "python", Code: "import socket", Limits: sandbox.Limits{Timeout: time.Second}}
)

// TestEveryRequestDecisionAndRunIsRecorded: behind a Gate, the request (with
// the policy), the decision (who, how) and the run of the same id, in that
// order; a denied request has no run.
func TestEveryRequestDecisionAndRunIsRecorded(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		policy approvals.Policy
		req    sandbox.Request
		answer approvals.Outcome
		want   string
	}{
		{"risky runs harmless code", approvals.PolicyRisky, harmless, "", "request decision/not_required run"},
		{"approved", approvals.PolicyRisky, risky, approvals.OutcomeApproved, "request decision/approved run"},
		{"denied", approvals.PolicyAlways, harmless, approvals.OutcomeDenied, "request decision/denied"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ch := newChain(t, c.policy, sandbox.Capabilities{}, nil)
			if c.answer != "" {
				answer(ch.gate, c.answer)
			}
			_, err := ch.runner.Run(approvals.WithCall(context.Background(), approvals.Call{Requester: approvals.Requester{Client: "ide 2.0"}}), c.req)
			if (err == nil) != strings.HasSuffix(c.want, "run") {
				t.Fatalf("Run: %v", err)
			}
			es, text := ch.entries(t)
			if got := events(es); got != c.want {
				t.Fatalf("entries %s, want %s:\n%s", got, c.want, text)
			}
			for _, e := range es {
				if e.ID != es[0].ID || e.CodeSHA256 != approvals.HashRequest(c.req) {
					t.Errorf("entry %+v is not filed under the request %s and its hash", e, es[0].ID)
				}
			}
			if es[0].Policy != c.policy || es[0].Requester == nil || es[0].Requester.Client != "ide 2.0" {
				t.Errorf("request entry %+v, want policy %s and the requester", es[0], c.policy)
			}
			if c.answer != "" && (es[1].By != "alice" || es[1].Via != approvals.ViaConsole) {
				t.Errorf("decision entry %+v does not say who decided how", es[1])
			}
		})
	}
}

// TestWithoutAGate: with no approval policy there is no Gate; each request
// is recorded with the policy never, then its run, and nothing is decided.
func TestWithoutAGate(t *testing.T) {
	t.Parallel()
	ch := newChain(t, "", sandbox.Capabilities{}, nil)
	ctx := approvals.WithCall(context.Background(), approvals.Call{Requester: approvals.Requester{Client: "ide 2.0", Transport: "stdio"}})
	if _, err := ch.runner.Run(ctx, harmless); err != nil || ch.runs.Load() != 1 {
		t.Fatalf("Run: %v (runs %d)", err, ch.runs.Load())
	}
	es, text := ch.entries(t)
	if got := events(es); got != "request run" {
		t.Fatalf("entries %s, want a request and its run:\n%s", got, text)
	}
	if es[0].Policy != approvals.PolicyNever || es[0].Requester.Client != "ide 2.0" || es[1].ID != es[0].ID || es[1].ExitCode == nil || es[1].Sandbox != "process" {
		t.Errorf("entries:\n%s", text)
	}
}

// TestWhatARequestIsRecordedWith: the session a call runs in (in the request
// and the run), its files by their digests alone, its packages, the network
// policy and what the run reached, a session's creation as an action, and
// every hidden character escaped.
func TestWhatARequestIsRecordedWith(t *testing.T) {
	t.Parallel()
	allow, _ := egress.ParseAllowlist([]string{"pypi.org"})
	report := &egress.Report{
		Reached: []egress.Reached{{Host: "pypi.org", Port: 443, Address: "192.0.2.1", Connections: 1}},
		Refused: []egress.Refused{{Host: "evil.example", Port: 80, Reason: egress.ReasonNotAllowed, Count: 1}},
	}
	ch := newChain(t, approvals.PolicyNever, sandbox.Capabilities{Egress: egress.Policy{Allow: allow}.Info(true, "127.0.0.1:3128")},
		&sandbox.Result{Sandbox: sandbox.ModeProcess, Network: report})
	req := sandbox.Request{Language: "python", Code: "print('a\u202eb')", Session: "ses_0123", Packages: []string{"requests==2.31.0"},
		Files: []artifacts.Input{{Path: "run.sh", Data: []byte("echo shown\n")}}}
	if _, err := ch.runner.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	creation := sandbox.Request{Language: "python", Packages: []string{"requests==2.31.0"}, NewSession: &sandbox.NewSession{}}
	if _, err := ch.runner.Run(context.Background(), creation); err != nil {
		t.Fatal(err)
	}
	es, text := ch.entries(t)
	if got := events(es); got != "request decision/not_required run request decision/not_required run" {
		t.Fatalf("entries %s:\n%s", got, text)
	}
	request, run := es[0], es[2]
	if request.Session != "ses_0123" || run.Session != "ses_0123" {
		t.Errorf("the session is not named in the request and the run:\n%s", text)
	}
	sum := sha256.Sum256([]byte("echo shown\n"))
	if len(request.Files) != 1 || request.Files[0] != (approvals.AskFile{Path: "run.sh", Size: 11, SHA256: hex.EncodeToString(sum[:])}) || strings.Contains(text, "echo shown") {
		t.Errorf("the files are not recorded by their digests alone:\n%s", text)
	}
	if !reflect.DeepEqual(request.Packages, req.Packages) {
		t.Errorf("packages recorded %q", request.Packages)
	}
	if request.NetworkPolicy == nil || !reflect.DeepEqual(request.NetworkPolicy.Allow, []string{"pypi.org"}) {
		t.Errorf("network policy recorded %+v", request.NetworkPolicy)
	}
	if run.Network == nil || len(run.Network.Reached) != 1 || run.Network.Refused[0].Reason != egress.ReasonNotAllowed {
		t.Errorf("network report recorded %+v", run.Network)
	}
	if es[3].Action != approvals.ActionSessionCreate || es[3].Code != "" {
		t.Errorf("a session's creation is recorded as %+v", es[3])
	}
	if strings.ContainsRune(text, 0x202e) || !strings.Contains(text, `print('a\u202eb')`) {
		t.Errorf("the audit log does not escape hidden characters:\n%s", text)
	}
}

// TestPrincipalsAreRecorded: a request is recorded with its principal and
// organisation, and the network policy it runs under is the run's own
// allowlist where it has one (a principal's network); a request no Gate
// decided on goes on with the id of its record, for the run token.
func TestPrincipalsAreRecorded(t *testing.T) {
	t.Parallel()
	allow, _ := egress.ParseAllowlist([]string{"pypi.org", "api.example.com"})
	narrow, _ := egress.ParseAllowlist([]string{"api.example.com"})
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	var decided approvals.Decision
	fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Egress: egress.Policy{Allow: allow}.Info(true, "127.0.0.1:3128")},
		RunFunc: func(ctx context.Context, _ sandbox.Request) (*sandbox.Result, error) {
			decided, _ = approvals.Decided(ctx)
			return &sandbox.Result{Sandbox: sandbox.ModeProcess}, nil
		}}
	ch := chain{runner: Wrap(fake, log, slog.New(slog.DiscardHandler)), path: path}
	ctx := approvals.WithCall(context.Background(), approvals.Call{Requester: approvals.Requester{Principal: "analytics-agent", Org: "acme", Transport: "http"}})
	for _, network := range []*egress.Allowlist{narrow, {}, nil} {
		req := harmless
		req.Network = network
		if _, err := ch.runner.Run(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	es, text := ch.entries(t)
	if len(es) != 6 || es[0].Requester == nil || es[0].Requester.Principal != "analytics-agent" || es[0].Requester.Org != "acme" {
		t.Fatalf("the principal is not recorded:\n%s", text)
	}
	for i, want := range [][]string{{"api.example.com"}, {}, {"pypi.org", "api.example.com"}} {
		if p := es[2*i].NetworkPolicy; p == nil || !reflect.DeepEqual(p.Allow, want) {
			t.Errorf("request %d is recorded under the network policy %+v, want %q", i, p, want)
		}
	}
	if decided.ID != es[4].ID || decided.ID == "" {
		t.Errorf("the run went on with the id %q, its record has %q", decided.ID, es[4].ID)
	}
}

// TestNothingRunsUnrecorded: a request that cannot be recorded does not run.
func TestNothingRunsUnrecorded(t *testing.T) {
	t.Parallel()
	for _, policy := range []approvals.Policy{"", approvals.PolicyRisky} {
		ch := newChain(t, policy, sandbox.Capabilities{}, nil)
		_ = ch.log.Close()
		if _, err := ch.runner.Run(context.Background(), harmless); !errors.Is(err, ErrWrite) || ch.runs.Load() != 0 {
			t.Errorf("policy %q: Run with the log closed = %v (runs %d), want ErrWrite and no run", policy, err, ch.runs.Load())
		}
	}
}

// TestRecent: the Log keeps what it records for the console, grouped by
// request, latest first, and a Log reopened picks up the end of its file.
func TestRecent(t *testing.T) {
	t.Parallel()
	ch := newChain(t, approvals.PolicyRisky, sandbox.Capabilities{}, nil)
	if _, err := ch.runner.Run(context.Background(), harmless); err != nil {
		t.Fatal(err)
	}
	answer(ch.gate, approvals.OutcomeDenied)
	if _, err := ch.runner.Run(context.Background(), risky); !errors.Is(err, approvals.ErrNotApproved) {
		t.Fatalf("risky run: %v", err)
	}
	recent := ch.log.Recent(10)
	if len(recent) != 2 {
		t.Fatalf("Recent = %+v, want 2 requests", recent)
	}
	denied, ran := recent[0], recent[1]
	if denied.Request == nil || denied.Request.Code != risky.Code || len(denied.Decisions) != 1 || denied.Decisions[0].Outcome != approvals.OutcomeDenied || denied.Decisions[0].By != "alice" || denied.Run != nil {
		t.Errorf("latest = %+v", denied)
	}
	if ran.Request == nil || len(ran.Decisions) != 1 || ran.Decisions[0].Outcome != approvals.OutcomeNotRequired || ran.Run == nil || ran.Run.ExitCode == nil || *ran.Run.ExitCode != 0 {
		t.Errorf("earlier = %+v", ran)
	}
	if got := ch.log.Recent(1); len(got) != 1 || got[0].ID != denied.ID {
		t.Errorf("Recent(1) = %+v", got)
	}

	_ = ch.log.Close()
	again, err := Open(ch.path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.Recent(10); len(got) != 2 || got[0].ID != denied.ID || got[1].Run == nil {
		t.Errorf("after reopening: %+v", got)
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
