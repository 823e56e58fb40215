package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	// By default the flagged code waits until the timeout denies it (2 s);
	// opted in, the client's answer must arrive before it, so the timeout
	// is approvalEnv's 60 s: a busy machine cannot make the round trip
	// outlast it.
	env := map[string]string{
		"CODE_EXEC_APPROVAL":         "risky",
		"CODE_EXEC_APPROVAL_TIMEOUT": "2s",
		"CODE_EXEC_AUTH_TOKEN":       e2eAuthToken,
	}
	if optIn {
		env["CODE_EXEC_APPROVAL_ELICIT"] = "true"
		delete(env, "CODE_EXEC_APPROVAL_TIMEOUT")
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

// TestApprovalConsoleToken: the console's API answers 401 without a token
// even on loopback; the server made one, wrote it to a file only its user
// can read, logged a login URL with it, and removes the file at shutdown.
func TestApprovalConsoleToken(t *testing.T) {
	t.Parallel()
	a := approvalConnect(t, approvalOpts{transport: http_})
	fi, err := os.Stat(a.tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 || len(a.token) < 32 {
		t.Fatalf("token file %s: %v, mode %v, token of %d characters", a.tokenFile, err, fi.Mode().Perm(), len(a.token))
	}
	if login := logField(a.srv.stderr.String(), "approvals console", "login_url"); login != a.console+"#token="+a.token {
		t.Errorf("login URL %q, want the console URL with the token in its fragment", login)
	}
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
	}{
		{"GET", "api/pending", nil},
		{"GET", "api/pending", map[string]string{"Authorization": "Bearer wrong-token-0123456789abcdef"}},
		{"POST", "api/requests/0123456789ab/approve", map[string]string{"X-Codeexec-Admin": "cli"}},
	} {
		req, _ := http.NewRequest(c.method, a.console+c.path, nil)
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with %v: %d, want 401", c.method, c.path, c.hdr, resp.StatusCode)
		}
	}
	resp, err := a.api(t, http.MethodGet, "api/pending")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET api/pending with the token: %v %v", resp, err)
	}
	resp.Body.Close()
	if out, err := a.cli(t, "list"); err != nil || !strings.Contains(out, "No run is waiting") {
		t.Fatalf("codeexec approvals list with the token file: %v\n%s", err, out)
	}

	a.srv.stop()
	if _, err := os.Stat(a.tokenFile); !os.IsNotExist(err) {
		t.Errorf("the token file is still there after shutdown: %v", err)
	}
	if out, err := a.cli(t, "list"); err == nil || !strings.Contains(out, "no admin token") {
		t.Errorf("codeexec approvals after shutdown: %v\n%s", err, out)
	}
}

// TestApprovalSandboxedCodeCannotAnswer: with the network isolation of
// process mode turned off, code can reach the loopback console, but without
// the token it can neither list pending runs nor approve another one, and
// it cannot read the token file.
func TestApprovalSandboxedCodeCannotAnswer(t *testing.T) {
	t.Parallel()
	a := approvalConnect(t, approvalOpts{env: map[string]string{"CODE_EXEC_PROCESS_DISABLE": "network"}})
	victim := callAsync(a.cs, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "bash", "code": "echo victim ran"}})
	victimID := a.waitPending(t, 1)[0]

	probe := fmt.Sprintf(`import urllib.request, urllib.error
def call(method, path):
    req = urllib.request.Request(%q + path, method=method, data=b"{}" if method == "POST" else None,
                                 headers={"X-Codeexec-Admin": "cli", "Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(req, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return type(e).__name__
print("pending", call("GET", "api/pending"))
print("approve", call("POST", "api/requests/%s/approve"))
try:
    open(%q).read()
    print("token file readable")
except Exception as e:
    print("token file", type(e).__name__)
`, a.console, victimID, a.tokenFile)
	ch := callAsync(a.cs, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": probe}})
	ids := a.waitPending(t, 2)
	probeID := ids[0]
	if probeID == victimID {
		probeID = ids[1]
	}
	if out, err := a.cli(t, "approve", "--by", "operator", probeID); err != nil {
		t.Fatalf("approving the probe: %v\n%s", err, out)
	}
	ans := <-ch
	if ans.err != nil || ans.res.IsError {
		t.Fatalf("probe: %v %q", ans.err, text(ans.res))
	}
	out := decodeExec(t, ans.res).Stdout
	if !strings.Contains(out, "pending 401\n") || !strings.Contains(out, "approve 401\n") {
		t.Fatalf("sandboxed code used the console's API:\n%s", out)
	}
	// The token file is out of reach where the run sees only the system's
	// files, or runs as another user than the server (which runs as root).
	if filesystemIsolated(t, a.cs) || os.Geteuid() == 0 {
		if strings.Contains(out, "token file readable") {
			t.Fatalf("sandboxed code read the console's token file:\n%s", out)
		}
	} else {
		t.Logf("without filesystem isolation, as the server's own user, code can read the token file as it can any file of that user: %s", out)
	}
	// The victim still waits for a person.
	if ids := a.waitPending(t, 1); ids[0] != victimID {
		t.Fatalf("pending = %v, want the victim %s", ids, victimID)
	}
	if out, err := a.cli(t, "deny", victimID); err != nil {
		t.Fatalf("denying the victim: %v\n%s", err, out)
	}
	select {
	case ans := <-victim:
		wantDenied(t, ans.res, ans.err, "denied")
	case <-time.After(30 * time.Second):
		t.Fatal("the victim's call did not end after its denial")
	}
}

// filesystemIsolated reports sandbox_info's filesystem boundary.
func filesystemIsolated(t *testing.T, cs *mcp.ClientSession) bool {
	t.Helper()
	res := call(t, cs, "sandbox_info", map[string]any{})
	var info struct {
		Boundaries struct {
			Filesystem bool `json:"filesystem"`
		} `json:"boundaries"`
	}
	remarshal(t, res.StructuredContent, &info)
	return info.Boundaries.Filesystem
}
