package approvals

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// A person approving a request sees the packages it installs, and the
// approval is bound to them.
func TestTheApproverSeesPackages(t *testing.T) {
	t.Parallel()
	fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}
	g := NewGate(fake, GateConfig{Policy: PolicyAlways, Timeout: time.Minute, Logger: slog.New(slog.DiscardHandler), WaitInterval: 10 * time.Millisecond})
	t.Cleanup(func() { g.Close() })
	req := sandbox.Request{Language: "python", Code: "import requests", Packages: []string{"requests==2.31.0"}}
	var shown Ask
	approve := approverFunc(func(ctx context.Context, a Ask) (Decision, error) {
		shown = a
		return Decision{Outcome: OutcomeApproved, By: "me", Via: ViaElicitation}, nil
	})
	if _, err := g.Run(WithCall(context.Background(), Call{Approver: approve}), req); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shown.Packages, req.Packages) {
		t.Errorf("packages shown %q", shown.Packages)
	}
	other := req
	other.Packages = []string{"requests==2.32.0"}
	none := req
	none.Packages = nil
	if HashRequest(req) == HashRequest(other) || HashRequest(req) == HashRequest(none) {
		t.Error("the request hash does not cover the packages")
	}
}
