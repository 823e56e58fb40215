package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const e2eAuthToken = "e2e-gateway-token-0123456789abcdef"

// TestApprovalSelfApproval: behind CODE_EXEC_AUTH_TOKEN (a gateway, where
// the MCP client is the agent), the client's own approval does not count
// by default: it is never asked, it gets no input request to answer, and
// the flagged code waits for the console until the timeout denies it. With
// CODE_EXEC_APPROVAL_ELICIT=true the operator opts in and the client's
// approval runs the code. sandbox_info and the start-up log say which.
func TestApprovalSelfApproval(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ transport, version string }{
		{http_, "2025-06-18"},
		{http_, "2026-07-28"},
		{sse, ""},
	} {
		for _, optIn := range []bool{false, true} {
			name := c.transport + " " + c.version + " default"
			if optIn {
				name = c.transport + " " + c.version + " opted in"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testSelfApproval(t, c.transport, c.version, optIn)
			})
		}
	}
}

func testSelfApproval(t *testing.T, transport, version string, optIn bool) {
	var asked atomic.Int32
	env := map[string]string{
		"CODE_EXEC_APPROVAL":         "risky",
		"CODE_EXEC_APPROVAL_TIMEOUT": "2s",
		"CODE_EXEC_AUTH_TOKEN":       e2eAuthToken,
	}
	if optIn {
		env["CODE_EXEC_APPROVAL_ELICIT"] = "true"
	}
	a := approvalConnect(t, approvalOpts{
		transport:       transport,
		protocolVersion: version,
		token:           e2eAuthToken,
		env:             env,
		client: &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		}},
	})
	info := sandboxInfo(t, a.cs)
	who := logField(a.srv.stderr.String(), "approvals", "who_can_approve")
	risky := "import os\nprint('self-approved', len(os.environ) >= 0)"
	res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": risky}})

	if optIn {
		wantRan(t, res, err, "self-approved True\n")
		if asked.Load() == 0 {
			t.Error("the client was not asked although CODE_EXEC_APPROVAL_ELICIT=true")
		}
		for _, s := range []string{info.Approval, who} {
			if !strings.Contains(s, "the person behind the MCP client") || !strings.Contains(s, "CODE_EXEC_APPROVAL_ELICIT=true") {
				t.Errorf("who can approve, opted in: %q", s)
			}
		}
		return
	}
	wantDenied(t, res, err, "approval timeout")
	if res.NeedsInput() {
		t.Error("the client was handed an input request to approve its own code")
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the client was asked %d times to approve its own code", n)
	}
	for _, s := range []string{info.Approval, who} {
		if !strings.Contains(s, "only operators on the approvals console") || !strings.Contains(s, "do not count") || !strings.Contains(s, "CODE_EXEC_AUTH_TOKEN") {
			t.Errorf("who can approve, behind a token: %q", s)
		}
	}
	if version == "2026-07-28" {
		// An approval the client makes up on its own is refused too.
		res, err = a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": risky},
			InputResponses: mcp.InputResponseMap{"approval": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}})
		wantDenied(t, res, err, "not issued by this server")
	}
	if log := a.auditLog(t); strings.Contains(log, `"event":"run"`) {
		t.Errorf("flagged code ran behind a token without an operator:\n%s", log)
	}
}
