package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// invalidCall is a tools/call whose code carries the bytes C3 28 FF FE.
const invalidCall = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"print('` + "\xc3\x28\xff\xfe" + `')"}}}`

func TestParseError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		msg, id string
	}{
		{invalidCall, "7"},
		{`{"jsonrpc":"2.0","id":"a-1","method":"x","params":{"s":"` + "\xff" + `"}}`, `"a-1"`},
		{`{"jsonrpc":"2.0","id":"` + "\xff" + `","method":"x"}`, "null"},
		{`{"jsonrpc":"2.0","method":"notifications/x","params":{"s":"` + "\xff" + `"}}`, "null"},
		{"\xff\xfe", "null"},
	}
	for _, c := range cases {
		resp, hasID := parseError([]byte(c.msg))
		var e rpcError
		if err := json.Unmarshal(resp, &e); err != nil {
			t.Fatalf("%q: %v", resp, err)
		}
		if string(e.ID) != c.id || hasID != (c.id != "null") || e.Error.Code != -32700 || !strings.Contains(e.Error.Message, "not valid UTF-8") {
			t.Errorf("parseError(%q) = %s", c.msg, resp)
		}
	}
	if _, hasID := parseError([]byte(invalidCall)); !hasID {
		t.Fatal("no id")
	}
	if msg, at := utf8Error([]byte(invalidCall)), strings.Index(invalidCall, "\xc3"); !strings.Contains(msg, fmt.Sprintf("byte 0xc3 at offset %d)", at)) {
		t.Errorf("utf8Error = %q", msg)
	}
}

// recordingServer is a Server over a fake that records the code it runs.
func recordingServer(t *testing.T) (*Server, func() []string) {
	t.Helper()
	var (
		mu   sync.Mutex
		code []string
	)
	fake := &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			mu.Lock()
			code = append(code, req.Code)
			mu.Unlock()
			return &sandbox.Result{Stdout: "ok\n", Sandbox: sandbox.ModeProcess}, nil
		},
	}
	return New(fake, testOptions()), func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), code...) }
}

// TestStdioRejectsInvalidUTF8: a line that is not valid UTF-8 gets a parse
// error with its id, the code never runs, and the next call is served.
func TestStdioRejectsInvalidUTF8(t *testing.T) {
	s, ran := recordingServer(t)
	in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" + invalidCall + "\n" + validCall + "\n")
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard against a hang only
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.ServeStdio(ctx, in, &out) }()
	if !out.await(ctx, `"id":99`) {
		t.Fatalf("no answer to the valid call; stdout: %s", out.String())
	}
	cancel()
	<-done
	var rejected bool
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var e rpcError
		if json.Unmarshal(sc.Bytes(), &e) == nil && string(e.ID) == "7" {
			rejected = e.Error.Code == -32700 && strings.Contains(e.Error.Message, "not valid UTF-8")
		}
	}
	if !rejected {
		t.Errorf("the invalid call was not answered with a parse error; stdout:\n%s", out.String())
	}
	if got := ran(); len(got) != 1 || got[0] != "print(1)" {
		t.Errorf("ran %q, want only the valid call's code", got)
	}
}

// TestHTTPRejectsInvalidUTF8: over streamable HTTP the invalid call gets
// its parse error in the response; a message without an id gets 400.
func TestHTTPRejectsInvalidUTF8(t *testing.T) {
	t.Parallel()
	s, ran := recordingServer(t)
	h, _, err := s.HTTPHandler(TransportHTTP, "")
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := post(invalidCall)
	var e rpcError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusOK || string(e.ID) != "7" || e.Error.Code != -32700 {
		t.Fatalf("invalid call: %d %s", rec.Code, rec.Body)
	}
	if rec := post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"` + "\xff" + `"}}`); rec.Code != http.StatusBadRequest {
		t.Fatalf("invalid notification: %d %s", rec.Code, rec.Body)
	}
	if len(ran()) != 0 {
		t.Fatalf("ran %q", ran())
	}
	// Valid messages pass through unchanged.
	if rec := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"serverInfo"`) {
		t.Fatalf("initialize: %d %s", rec.Code, rec.Body)
	}
}

// TestSSERejectsInvalidUTF8: over SSE the parse error goes to the
// session's stream, like every response.
func TestSSERejectsInvalidUTF8(t *testing.T) {
	t.Parallel()
	var (
		gotSession string
		gotResp    json.RawMessage
	)
	h := rejectInvalidUTF8(http.NotFoundHandler(), func(session string, resp json.RawMessage) error {
		gotSession, gotResp = session, resp
		return nil
	}, testOptions().Logger)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/message?sessionId=s-1", strings.NewReader(invalidCall)))
	if rec.Code != http.StatusAccepted || gotSession != "s-1" || !strings.Contains(string(gotResp), `"id":7`) {
		t.Fatalf("status %d, sent %q to session %q", rec.Code, gotResp, gotSession)
	}
}
