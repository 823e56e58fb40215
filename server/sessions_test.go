package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// fakeBackend starts sessions whose calls echo their code; a call whose
// code is "lose" reports that it lost the state.
type fakeBackend struct{}

type echoSession struct{}

func (fakeBackend) Start(context.Context, sessions.Spec) (sessions.Session, error) {
	return echoSession{}, nil
}

func (echoSession) Exec(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	res := &sandbox.Result{Stdout: req.Code + "\n", Sandbox: sandbox.ModeProcess}
	if req.Code == "lose" {
		res.TimedOut, res.StateLost, res.ExitCode, res.Signal = true, true, 137, "killed"
	}
	return res, nil
}

func (echoSession) Close() error { return nil }

func newSessionServer(t *testing.T) *Server {
	t.Helper()
	m := sessions.New(sessions.Config{Backend: fakeBackend{}, MaxSessions: 2, IdleTimeout: time.Minute, MaxLifetime: time.Hour})
	t.Cleanup(func() { _ = m.Shutdown() })
	opts := testOptions()
	opts.Sessions, opts.SessionIdleTimeout = m, time.Minute
	fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}
	return New(sessions.Route(m, fake), opts)
}

func toolCall(name string, args any) mcp.CallToolRequest {
	r := call(args)
	r.Params.Name = name
	return r
}

func TestSessionTools(t *testing.T) {
	s := newSessionServer(t)
	alice := s.mcp.WithContext(context.Background(), fakeSession{id: "alice"})
	bob := s.mcp.WithContext(context.Background(), fakeSession{id: "bob"})

	res, _ := s.handleSessionCreate(alice, toolCall(ToolSessionCreate, map[string]any{"idle_timeout_seconds": 3600}))
	if !res.IsError || !strings.Contains(resultText(res), "CODE_EXEC_SESSION_IDLE_TIMEOUT") {
		t.Fatalf("an idle timeout over the cap: %s", resultText(res))
	}
	res, _ = s.handleSessionCreate(alice, toolCall(ToolSessionCreate, map[string]any{}))
	if res.IsError {
		t.Fatalf("session_create: %s", resultText(res))
	}
	created := res.StructuredContent.(SessionOutput)
	if created.Language != "python" || !created.KeepsVariables || created.IdleTimeoutSeconds != 60 {
		t.Fatalf("session_create = %+v, want a python session with the server's idle timeout", created)
	}
	id := created.SessionID

	res, _ = s.handleExecute(alice, call(map[string]any{"language": "python", "code": "x = 1", "session_id": id}))
	out := res.StructuredContent.(ExecuteOutput)
	if res.IsError || out.Stdout != "x = 1\n" || out.SessionID != id || out.StateLost {
		t.Fatalf("a call in the session: %+v %s", out, resultText(res))
	}
	res, _ = s.handleExecute(alice, call(map[string]any{"language": "python", "code": "lose", "session_id": id}))
	out = res.StructuredContent.(ExecuteOutput)
	if !res.IsError || !out.StateLost || !strings.Contains(resultText(res), "variables of earlier calls are lost") {
		t.Fatalf("a call that lost the state: %+v %s", out, resultText(res))
	}
	res, _ = s.handleExecute(alice, call(map[string]any{"language": "bash", "code": "ls", "session_id": id}))
	if !res.IsError || !strings.Contains(resultText(res), "runs python, not bash") {
		t.Fatalf("a call in another language: %s", resultText(res))
	}

	for name, res := range map[string]*mcp.CallToolResult{
		"execute": must(s.handleExecute(bob, call(map[string]any{"language": "python", "code": "x", "session_id": id}))),
		"close":   must(s.handleSessionClose(bob, toolCall(ToolSessionClose, map[string]any{"session_id": id}))),
	} {
		if !res.IsError || !strings.Contains(resultText(res), "Unknown session") {
			t.Errorf("bob's %s in alice's session: %s", name, resultText(res))
		}
	}
	if l := must(s.handleSessionList(bob, toolCall(ToolSessionList, map[string]any{}))).StructuredContent.(SessionListOutput); len(l.Sessions) != 0 {
		t.Errorf("bob lists %+v", l.Sessions)
	}
	l := must(s.handleSessionList(alice, toolCall(ToolSessionList, map[string]any{}))).StructuredContent.(SessionListOutput)
	if len(l.Sessions) != 1 || l.Sessions[0].Calls != 2 || l.MaxSessions != 2 {
		t.Errorf("alice lists %+v", l)
	}
	if info := must(s.handleInfo(alice, mcp.CallToolRequest{})).StructuredContent.(InfoOutput); info.Sessions == nil || info.Sessions.Open != 1 || info.Sessions.MaxSessions != 2 {
		t.Errorf("sandbox_info's sessions: %+v", info.Sessions)
	}

	must(s.handleSessionCreate(bob, toolCall(ToolSessionCreate, map[string]any{"language": "js"})))
	res = must(s.handleSessionCreate(bob, toolCall(ToolSessionCreate, map[string]any{})))
	if !res.IsError || !strings.Contains(resultText(res), "CODE_EXEC_MAX_SESSIONS") {
		t.Errorf("a third session: %s", resultText(res))
	}
	if res := must(s.handleSessionClose(alice, toolCall(ToolSessionClose, map[string]any{"session_id": id}))); res.IsError {
		t.Fatalf("session_close: %s", resultText(res))
	}
	res = must(s.handleExecute(alice, call(map[string]any{"language": "python", "code": "x", "session_id": id})))
	if !res.IsError || !strings.Contains(resultText(res), "Unknown session") {
		t.Errorf("a call after session_close: %s", resultText(res))
	}
}

// With sessions on, code_execute's schema and decoder both know session_id.
func TestSessionIDIsDeclaredOnce(t *testing.T) {
	s := newSessionServer(t)
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(executeTool(sandbox.Capabilities{}, &s.opts).RawInputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if _, ok := schema.Properties["session_id"]; !ok {
		t.Fatalf("code_execute's schema lacks session_id: %v", schema.Properties)
	}
	a, err := DecodeExecuteArgs(map[string]any{"language": "python", "code": "1", "session_id": "ses_1"}, s.opts)
	if err != nil || a.SessionID != "ses_1" {
		t.Fatalf("DecodeExecuteArgs: %+v %v", a, err)
	}
	if _, err := DecodeExecuteArgs(map[string]any{"language": "python", "code": "1", "session_id": " "}, s.opts); err == nil {
		t.Fatal("a blank session_id was accepted")
	}
	if _, err := DecodeExecuteArgs(map[string]any{"language": "python", "code": "1", "session_id": "ses_1"}, testOptions()); err == nil || !strings.Contains(err.Error(), "unknown argument") {
		t.Fatalf("session_id with sessions off: %v", err)
	}
}

func must(res *mcp.CallToolResult, err error) *mcp.CallToolResult {
	if err != nil {
		panic(err)
	}
	return res
}
