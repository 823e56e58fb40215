package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What an approver sees is what runs: these cases drive the real binary
// with the MCP Go SDK client.

// waitAsked waits until the call ch is pending on the console and returns
// its id; it fails the test if the call ends first (it ran, or was refused,
// without asking anyone).
func (a *approvalServer) waitAsked(t *testing.T, ch chan *toolAnswer) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case ans := <-ch:
			if ans.err != nil {
				t.Fatalf("the call ended without waiting for approval: %v", ans.err)
			}
			t.Fatalf("the call ended without waiting for approval: isError %v, %q", ans.res.IsError, text(ans.res))
		default:
		}
		if ids, err := a.pendingIDs(t); err == nil && len(ids) == 1 {
			return ids[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never became pending")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestApprovalRiskyChecksFiles: under CODE_EXEC_APPROVAL=risky, harmless
// code that runs a file of the request waits for a person when the file
// is risky, and the console's API and `codeexec approvals list` show the
// file's text.
func TestApprovalRiskyChecksFiles(t *testing.T) {
	t.Parallel()
	a := approvalConnect(t, approvalOpts{env: map[string]string{"CODE_EXEC_APPROVAL": "risky"}})
	script := "rm -f ./nothing-here\necho removed\n"
	ch := callAsync(a.cs, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
		"language": "bash", "code": "bash run.sh",
		"files": []map[string]any{{"path": "run.sh", "content": script}},
	}})
	id := a.waitAsked(t, ch)
	asks, err := a.pending(t)
	if err != nil || len(asks) != 1 || len(asks[0].Files) != 1 || asks[0].Files[0].Text != script || !strings.Contains(strings.Join(asks[0].Reasons, "\n"), `in the file "run.sh": deletes or overwrites files: runs "rm" (line 1)`) {
		t.Fatalf("the console's API does not show the file and why it is risky: %+v (err %v)", asks, err)
	}
	out, err := a.cli(t, "list")
	if err != nil || !strings.Contains(out, "run.sh") || !strings.Contains(out, "rm -f ./nothing-here") {
		t.Fatalf("approvals list does not show the file's text: %v\n%s", err, out)
	}
	if out, err := a.cli(t, "deny", id); err != nil {
		t.Fatalf("approvals deny: %v\n%s", err, out)
	}
	ans := <-ch
	wantDenied(t, ans.res, ans.err, "denied")
}
