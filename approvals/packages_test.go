package approvals

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// A person approving a request sees the packages it installs, the audit
// log records them, and the approval is bound to them.
func TestTheApproverSeesPackages(t *testing.T) {
	t.Parallel()
	fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	audit, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(fake, GateConfig{Policy: PolicyAlways, Timeout: time.Minute, Audit: audit, Logger: slog.New(slog.DiscardHandler), WaitInterval: 10 * time.Millisecond})
	t.Cleanup(func() { g.Close(); _ = audit.Close() })
	req := sandbox.Request{Language: "python", Code: "import requests", Packages: []string{"requests==2.31.0"}}
	var shown Ask
	approve := approverFunc(func(ctx context.Context, a Ask) (Decision, error) {
		shown = a
		return Decision{Outcome: OutcomeApproved, By: "me", Via: ViaElicitation}, nil
	})
	if _, err := g.For(Call{Approver: approve}).Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shown.Packages, req.Packages) {
		t.Errorf("packages shown %q", shown.Packages)
	}
	log, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"packages":["requests==2.31.0"]`) {
		t.Errorf("the audit log does not record the packages:\n%s", log)
	}
	other := req
	other.Packages = []string{"requests==2.32.0"}
	none := req
	none.Packages = nil
	if HashRequest(req) == HashRequest(other) || HashRequest(req) == HashRequest(none) {
		t.Error("the request hash does not cover the packages")
	}
}
