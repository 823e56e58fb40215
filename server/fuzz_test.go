package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// FuzzDecodeExecuteArgs: any bytes as code_execute's arguments either decode
// to arguments within the operator's limits or are rejected with one line.
func FuzzDecodeExecuteArgs(f *testing.F) {
	for _, s := range []string{
		`{"language":"python","code":"print(2**64)"}`,
		`{"language":"js","code":"1","stdin":"x","timeout_seconds":2.5}`,
		`{"language":"bash","code":"echo","timeout_seconds":1e308}`,
		`{"language":"python","code":"\u0000"}`,
		`{"language":7}`, `[]`, `null`, `"x"`, `{"code":{}}`, `{"language":"python","code":"x","extra":1}`,
	} {
		f.Add([]byte(s))
	}
	opts := testOptions()
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := DecodeExecuteArgs(json.RawMessage(raw), opts)
		if err != nil {
			if msg := err.Error(); msg == "" || strings.Contains(msg, "\n") {
				t.Fatalf("error is not one line: %q", msg)
			}
			return
		}
		if _, ok := sandbox.Languages[a.Language]; !ok {
			t.Fatalf("accepted language %q", a.Language)
		}
		if strings.TrimSpace(a.Code) == "" || int64(len(a.Code)) > opts.MaxCode || strings.ContainsRune(a.Code, 0) || !utf8.ValidString(a.Code) {
			t.Fatalf("accepted code %q", a.Code)
		}
		if a.Timeout <= 0 || a.Timeout > opts.MaxTimeout {
			t.Fatalf("accepted timeout %v", a.Timeout)
		}
	})
}

func fuzzServer(t testing.TB) *Server {
	fake := &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Languages: []sandbox.LanguageStatus{{Name: "python", Available: true}}},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			return &sandbox.Result{Stdout: "ok\n", Sandbox: sandbox.ModeProcess}, nil
		},
	}
	return New(fake, testOptions())
}

const validCall = `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"print(1)"}}}`

// FuzzHTTPTransport: any request body to the streamable HTTP endpoint gets
// an HTTP answer without crashing the server, which then still serves a
// valid call.
func FuzzHTTPTransport(f *testing.F) {
	for _, s := range []string{
		validCall,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, `{`, `null`, "\x00\xff", `{"jsonrpc":"2.0","id":{},"method":"tools/call"}`,
	} {
		f.Add([]byte(s), "2026-07-28")
		f.Add([]byte(s), "2025-06-18")
	}
	s := fuzzServer(f)
	h, _, err := s.HTTPHandler(TransportHTTP, "http://127.0.0.1")
	if err != nil {
		f.Fatal(err)
	}
	post := func(body []byte, version string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body))
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if version != "" {
			req.Header.Set("MCP-Protocol-Version", version)
		}
		// Inputs that open a stream (subscriptions, tasks) hold the handler
		// until this context ends; the fake runner answers at once, so one
		// second bounds them without cutting any real answer short, and
		// keeps the fuzz workers responsive enough to stop on time.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		return rec
	}
	f.Fuzz(func(t *testing.T, body []byte, version string) {
		rec := post(body, version)
		if rec.Code < 200 || rec.Code >= 600 || rec.Code == http.StatusInternalServerError {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}

// FuzzStdioTransport: any line on stdin gets a JSON-RPC answer or none,
// never a crash or non-JSON on stdout, and a valid call afterwards is served.
func FuzzStdioTransport(f *testing.F) {
	for _, s := range []string{validCall, `{`, `[]`, `{"jsonrpc":"2.0","id":1,"method":"nope"}`, "\xff\xfe", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"code_execute","arguments":"x"}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		line = strings.ReplaceAll(line, "\n", " ")
		s := fuzzServer(t)
		in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" + line + "\n" + validCall + "\n")
		var out syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard against a hang only
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- s.ServeStdio(ctx, in, &out) }()
		// The valid call's answer (id 99) must arrive.
		if !out.await(ctx, `"id":99`) {
			t.Fatalf("no answer to the valid call after %q; stdout: %s", line, out.String())
		}
		cancel()
		<-done
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Fatalf("stdout carries a line that is not JSON: %q", sc.Text())
			}
		}
	})
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced by each Write
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.buf.Write(p)
}

// await waits until the buffer holds s, woken by each write, or until ctx
// ends; it reports whether it does.
func (b *syncBuffer) await(ctx context.Context, s string) bool {
	for {
		b.mu.Lock()
		if strings.Contains(b.buf.String(), s) {
			b.mu.Unlock()
			return true
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*syncBuffer)(nil)
