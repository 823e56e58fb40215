package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// approvalServer is a codeexec started with approvals on, and a client.
type approvalServer struct {
	cs      *mcp.ClientSession
	srv     *server
	env     map[string]string
	audit   string
	console string // http://127.0.0.1:port/ of the approvals console
	// token is the console's token, which the server made and wrote to
	// tokenFile (its log says where).
	token     string
	tokenFile string
	// disconnect cancels the context of Connect, which holds the SSE stream.
	disconnect context.CancelFunc
}

type approvalOpts struct {
	env             map[string]string
	protocolVersion string
	client          *mcp.ClientOptions
	transport       string
	token           string // the bearer token of the HTTP transports
	clientName      string // the client's name (codeexec-e2e-approvals if empty)
}

// approvalEnv is serverEnv with approvals always on, a console on a free
// loopback port, an audit log in a temporary directory, and a private
// XDG_RUNTIME_DIR for the console's token file.
func approvalEnv(t *testing.T, extra map[string]string) map[string]string {
	t.Helper()
	env := serverEnv(t, map[string]string{
		"CODE_EXEC_APPROVAL":         "always",
		"CODE_EXEC_APPROVAL_TIMEOUT": "60s",
		"CODE_EXEC_ADMIN_ADDR":       "127.0.0.1:0",
		"CODE_EXEC_AUDIT_LOG":        filepath.Join(t.TempDir(), "audit.jsonl"),
		"XDG_RUNTIME_DIR":            t.TempDir(),
	})
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// approvalConnect starts codeexec (stdio unless o.transport says) and
// connects a go-sdk client with o.client's handlers.
func approvalConnect(t *testing.T, o approvalOpts) *approvalServer {
	t.Helper()
	env := approvalEnv(t, o.env)
	// Cancelling ctx drops an SSE client's event stream: a client that
	// goes away.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	transport := o.transport
	if transport == "" {
		transport = stdio
	}
	name := o.clientName
	if name == "" {
		name = "codeexec-e2e-approvals"
	}
	cs, s := connect(t, transport, env, connectOpts{protocolVersion: o.protocolVersion, ctx: ctx, client: o.client, clientName: name, token: o.token})
	as := &approvalServer{cs: cs, srv: s, env: env, audit: env["CODE_EXEC_AUDIT_LOG"], disconnect: cancel}
	logged := func(out string) bool { return logField(out, "approvals console", "url") != "" }
	if _, ok := s.stderr.await(logged, eventWait, nil); !ok {
		t.Fatalf("codeexec never logged its approvals console; stderr:\n%s", s.logTail())
	}
	as.console = logField(s.stderr.String(), "approvals console", "url")
	as.tokenFile = logField(s.stderr.String(), "approvals console", "token_file")
	if as.tokenFile == "" {
		t.Fatalf("codeexec did not log where it wrote the console's token; stderr:\n%s", s.logTail())
	}
	b, err := os.ReadFile(as.tokenFile)
	if err != nil {
		t.Fatalf("reading the console's token: %v", err)
	}
	as.token = strings.TrimSpace(string(b))
	return as
}

// api calls the console's API with the token.
func (a *approvalServer) api(t *testing.T, method, path string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(method, a.console+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	return http.DefaultClient.Do(req)
}

// logField finds field of the first JSON log record with msg.
func logField(logs, msg, field string) string {
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
			if v, ok := rec[field].(string); ok {
				return v
			}
		}
	}
	return ""
}

// auditLog verifies the audit log with the real binary and returns it.
func (a *approvalServer) auditLog(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(binPath, "audit", "verify", a.audit).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "intact") {
		t.Fatalf("codeexec audit verify: %v\n%s", err, out)
	}
	b, err := os.ReadFile(a.audit)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// cli runs `codeexec approvals ...` against the server's console, as the
// same user in the same session (XDG_RUNTIME_DIR) but without the token:
// it finds the token file itself.
func (a *approvalServer) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"approvals"}, args...)...)
	cmd.Env = []string{"CODE_EXEC_ADMIN_ADDR=" + strings.TrimSuffix(strings.TrimPrefix(a.console, "http://"), "/"), "PATH=" + os.Getenv("PATH"), "XDG_RUNTIME_DIR=" + a.env["XDG_RUNTIME_DIR"]}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pendingAsk is the part of a pending request (GET /api/pending) that
// the tests read.
type pendingAsk struct {
	ID      string   `json:"id"`
	Code    string   `json:"code"`
	Stdin   string   `json:"stdin"`
	Reasons []string `json:"reasons"`
	Files   []struct {
		Path   string `json:"path"`
		Size   int    `json:"size"`
		SHA256 string `json:"sha256"`
		Text   string `json:"text"`
		Binary bool   `json:"binary"`
	} `json:"files"`
}

// pending asks the console once for the pending requests, oldest first.
func (a *approvalServer) pending(t *testing.T) ([]pendingAsk, error) {
	t.Helper()
	resp, err := a.api(t, http.MethodGet, "api/pending")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct {
		Pending []pendingAsk `json:"pending"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	return list.Pending, err
}

// pendingIDs asks the console once which requests are pending, oldest first.
func (a *approvalServer) pendingIDs(t *testing.T) ([]string, error) {
	t.Helper()
	asks, err := a.pending(t)
	ids := []string{}
	for _, p := range asks {
		ids = append(ids, p.ID)
	}
	return ids, err
}

// waitPending waits until the console lists n requests and returns their ids.
func (a *approvalServer) waitPending(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ids, err := a.pendingIDs(t)
		if err == nil && len(ids) == n {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console never listed %d pending requests (err %v)", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// callAsync calls code_execute in the background.
func callAsync(cs *mcp.ClientSession, params *mcp.CallToolParams) chan *toolAnswer {
	ch := make(chan *toolAnswer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := cs.CallTool(ctx, params)
		ch <- &toolAnswer{res, err}
	}()
	return ch
}

type toolAnswer struct {
	res *mcp.CallToolResult
	err error
}

func wantDenied(t *testing.T, res *mcp.CallToolResult, err error, words ...string) {
	t.Helper()
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	txt := text(res)
	if !res.IsError || !strings.HasPrefix(txt, "The code did not run") {
		t.Fatalf("want a denial, got isError=%v %q", res.IsError, txt)
	}
	for _, w := range words {
		if !strings.Contains(txt, w) {
			t.Errorf("denial %q does not mention %q", txt, w)
		}
	}
}

func wantRan(t *testing.T, res *mcp.CallToolResult, err error, stdout string) {
	t.Helper()
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if res.IsError || res.StructuredContent == nil {
		t.Fatalf("want a run, got isError=%v %q", res.IsError, text(res))
	}
	if out := decodeExec(t, res); out.Stdout != stdout {
		t.Fatalf("stdout = %q, want %q", out.Stdout, stdout)
	}
}

// TestApprovalElicitation: a client that supports elicitation is asked
// through it, on a protocol before 2026-07-28 (elicitation/create) and on
// 2026-07-28 (a multi-round-trip input request, which the go-sdk answers
// with the same handler and retries); accept runs, decline and cancel do not.
func TestApprovalElicitation(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"2025-06-18", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			testApprovalElicitation(t, version)
		})
	}
}

func testApprovalElicitation(t *testing.T, version string) {
	var (
		mu       sync.Mutex
		action   string
		messages []string
	)
	a := approvalConnect(t, approvalOpts{
		protocolVersion: version,
		transport:       http_,
		env:             map[string]string{"CODE_EXEC_APPROVAL": "risky"},
		client: &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			defer mu.Unlock()
			messages = append(messages, req.Params.Message)
			if action == "accept" {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
			}
			return &mcp.ElicitResult{Action: action}, nil
		}},
	})
	set := func(s string) { mu.Lock(); action = s; mu.Unlock() }
	risky := "import os\nprint(len(os.environ) >= 0)"

	// Harmless code under risky runs without asking.
	checkExample(t, a.cs, "process")
	if len(messages) != 0 {
		t.Fatalf("harmless code was sent for approval: %q", messages)
	}

	set("accept")
	res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": risky}})
	wantRan(t, res, err, "True\n")
	mu.Lock()
	msg := messages[len(messages)-1]
	mu.Unlock()
	for _, w := range []string{"python", risky, "reads environment variables or credentials", "codeexec-e2e-approvals"} {
		if !strings.Contains(msg, w) {
			t.Errorf("the elicitation message does not show %q:\n%s", w, msg)
		}
	}

	set("decline")
	res, err = a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": risky}})
	wantDenied(t, res, err, "denied")

	set("cancel")
	res, err = a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": risky}})
	wantDenied(t, res, err, "cancelled")

	log := a.auditLog(t)
	for _, w := range []string{`"outcome":"not_required"`, `"outcome":"approved","by":"the user of codeexec-e2e-approvals 1.0.0","via":"elicitation"`, `"outcome":"denied"`, `"outcome":"cancelled"`, `"event":"run"`} {
		if !strings.Contains(log, w) {
			t.Errorf("audit log lacks %s", w)
		}
	}
	if n := strings.Count(log, `"event":"run"`); n != 2 {
		t.Errorf("audit log has %d runs, want 2 (the example and the accepted one)", n)
	}
}

// TestApprovalMultiRoundTrip: on protocol 2026-07-28 the server answers
// with an input request; the approval comes back with a signed state that
// is bound to the code, good once, and cannot be made up.
func TestApprovalMultiRoundTrip(t *testing.T) {
	t.Parallel()
	a := approvalConnect(t, approvalOpts{
		transport:       http_,
		protocolVersion: "2026-07-28",
		client: &mcp.ClientOptions{
			// The test plays the client's part of the round trip itself.
			MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
			ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "decline"}, nil
			},
		},
	})
	code := "print('approved once')"
	args := map[string]any{"language": "python", "code": code}
	accept := mcp.InputResponseMap{"approval": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	ctx := context.Background()

	first := func() string {
		t.Helper()
		res, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if !res.NeedsInput() || res.RequestState == "" {
			t.Fatalf("want an input_required result with a requestState, got isError=%v %q", res.IsError, text(res))
		}
		ep, ok := res.InputRequests["approval"].(*mcp.ElicitParams)
		if !ok || !strings.Contains(ep.Message, code) {
			t.Fatalf("input request does not show the code: %#v", res.InputRequests)
		}
		return res.RequestState
	}
	retry := func(state string, args map[string]any, resp mcp.InputResponseMap) (*mcp.CallToolResult, error) {
		return a.cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: args, InputResponses: resp, RequestState: state})
	}

	state := first()
	res, err := retry(state, args, accept)
	wantRan(t, res, err, "approved once\n")

	t.Run("replayed", func(t *testing.T) {
		res, err := retry(state, args, accept)
		wantDenied(t, res, err, "already used")
	})
	t.Run("other code", func(t *testing.T) {
		st := first()
		res, err := retry(st, map[string]any{"language": "python", "code": "print('something else')"}, accept)
		wantDenied(t, res, err, "not issued by this server for this exact code")
	})
	t.Run("forged", func(t *testing.T) {
		st := first()
		forged := st[:len(st)-3] + "AAA"
		if forged == st {
			forged = st[:len(st)-3] + "BBB"
		}
		res, err := retry(forged, args, accept)
		wantDenied(t, res, err, "not issued by this server")
		// No state at all: the client approving on its own.
		res, err = retry("", args, accept)
		wantDenied(t, res, err, "not issued by this server")
	})
	t.Run("declined", func(t *testing.T) {
		st := first()
		res, err := retry(st, args, mcp.InputResponseMap{"approval": &mcp.ElicitResult{Action: "decline"}})
		wantDenied(t, res, err, "denied")
	})
	log := a.auditLog(t)
	for _, w := range []string{`"outcome":"replayed"`, `"outcome":"forged"`, `"outcome":"denied"`, `"outcome":"approved"`} {
		if !strings.Contains(log, w) {
			t.Errorf("audit log lacks %s", w)
		}
	}
	if n := strings.Count(log, `"event":"run"`); n != 1 {
		t.Errorf("audit log has %d runs, want exactly 1", n)
	}
}

// TestApprovalConsoleCLIAndTimeout: a client without elicitation waits,
// with progress notifications, for `codeexec approvals`; no answer in
// time denies; a client that leaves withdraws its request. Only the
// timeout's server has a short timeout (3 s): the CLI's answers come from
// a server with approvalEnv's 60 s, so that two starts of the codeexec
// binary on a busy machine cannot outlast the request.
func TestApprovalConsoleCLIAndTimeout(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		progress []string
	)
	client := &mcp.ClientOptions{ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		progress = append(progress, req.Params.Message)
		mu.Unlock()
	}}
	params := func(code string) *mcp.CallToolParams {
		p := &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "bash", "code": code}}
		p.SetProgressToken("tok-" + code)
		return p
	}

	// Timeout denies.
	short := approvalConnect(t, approvalOpts{env: map[string]string{"CODE_EXEC_APPROVAL_TIMEOUT": "3s"}, client: client})
	start := time.Now()
	res, err := short.cs.CallTool(context.Background(), params("echo never"))
	wantDenied(t, res, err, "approval timeout")
	if d := time.Since(start); d < 2500*time.Millisecond {
		t.Fatalf("denied after %s, before the 3s timeout", d)
	}
	mu.Lock()
	if len(progress) == 0 || !strings.Contains(progress[0], "Waiting for a person") || !strings.Contains(progress[0], short.console) {
		t.Errorf("progress notifications = %q, want a message that names the console", progress)
	}
	mu.Unlock()
	if log := short.auditLog(t); !strings.Contains(log, `"outcome":"timed_out"`) {
		t.Errorf("audit log lacks \"outcome\":\"timed_out\":\n%s", log)
	}

	// Approve with the CLI.
	a := approvalConnect(t, approvalOpts{client: client})
	ch := callAsync(a.cs, params("echo approved-by-cli"))
	ids := a.waitPending(t, 1)
	out, err := a.cli(t, "list")
	if err != nil || !strings.Contains(out, ids[0]) || !strings.Contains(out, "echo approved-by-cli") {
		t.Fatalf("approvals list: %v\n%s", err, out)
	}
	if out, err := a.cli(t, "approve", "--by", "dana", ids[0]); err != nil || !strings.Contains(out, "approved by dana") {
		t.Fatalf("approvals approve: %v\n%s", err, out)
	}
	ans := <-ch
	wantRan(t, ans.res, ans.err, "approved-by-cli\n")

	// Deny with the CLI.
	ch = callAsync(a.cs, params("echo denied-by-cli"))
	ids = a.waitPending(t, 1)
	if out, err := a.cli(t, "deny", "--by", "erin", "--note", "not today", ids[0]); err != nil {
		t.Fatalf("approvals deny: %v\n%s", err, out)
	}
	ans = <-ch
	wantDenied(t, ans.res, ans.err, "erin", "not today")

	log := a.auditLog(t)
	for _, w := range []string{`"by":"dana (cli`, `"by":"erin (cli`, `"via":"cli"`} {
		if !strings.Contains(log, w) {
			t.Errorf("audit log lacks %s", w)
		}
	}
}

// TestApprovalWithdrawn: a client that cancels its call, or disconnects,
// withdraws its pending request from the console.
func TestApprovalWithdrawn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, transport string
		leave           func(a *approvalServer, cancel context.CancelFunc)
	}{
		{"cancelled over http", http_, func(a *approvalServer, cancel context.CancelFunc) { cancel() }},
		{"disconnected over sse", sse, func(a *approvalServer, cancel context.CancelFunc) { a.disconnect(); _ = a.cs.Close() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := approvalConnect(t, approvalOpts{transport: c.transport})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() {
				_, _ = a.cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": "print(1)"}})
				close(done)
			}()
			a.waitPending(t, 1)
			c.leave(a, cancel)
			<-done
			a.waitPending(t, 0)
			waitFor(t, eventWait, "the audit log to record the withdrawal", func() bool {
				return strings.Contains(a.auditLog(t), `"outcome":"withdrawn"`)
			})
		})
	}
}

// TestApprovalAdminRefusesOpenAddress: a console beyond loopback without a
// token stops the server at start with one line naming the variable.
func TestApprovalAdminRefusesOpenAddress(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binPath)
	cmd.Env = envList(serverEnv(t, map[string]string{"CODE_EXEC_APPROVAL": "always", "CODE_EXEC_ADMIN_ADDR": "0.0.0.0:0"}))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "CODE_EXEC_ADMIN_TOKEN") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Fatalf("want a one-line refusal naming CODE_EXEC_ADMIN_TOKEN, got %v: %q", err, out)
	}
}

// TestApprovalSandboxInfo: sandbox_info describes the policy, the timeout
// and where approvals are answered.
func TestApprovalSandboxInfo(t *testing.T) {
	t.Parallel()
	a := approvalConnect(t, approvalOpts{})
	info := sandboxInfo(t, a.cs)
	for _, w := range []string{"always", "1m0s", a.console, "codeexec approvals", "elicitation", "audit log"} {
		if !strings.Contains(info.Approval, w) {
			t.Errorf("sandbox_info approval %q does not mention %q", info.Approval, w)
		}
	}
}
