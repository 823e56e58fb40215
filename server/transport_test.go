package server

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// serveTransport serves the transport's handler on a loopback listener
// with opts, and counts the runs that reach the sandbox.
func serveTransport(t *testing.T, transport Transport, opts Options) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var runs atomic.Int32
	s := New(&sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Languages: []sandbox.LanguageStatus{{Name: "python", Available: true}}},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			runs.Add(1)
			return &sandbox.Result{Stdout: "ran\n", Sandbox: sandbox.ModeProcess}, nil
		},
	}, opts)
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	h, shutdown, err := s.HTTPHandler(transport, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	t.Cleanup(func() {
		_ = shutdown(context.Background())
		srv.Close()
	})
	return srv, &runs
}

// sseSession opens an SSE stream as a client without Origin and returns
// the response, the message endpoint it announces and the data of the
// events that follow.
func sseSession(t *testing.T, base string) (*http.Response, string, <-chan string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sse", nil)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	events := make(chan string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "data: "); ok {
				events <- d
			}
		}
	}()
	endpoint, ok := <-events
	if !ok {
		t.Fatalf("GET /sse: %s, no endpoint", resp.Status)
	}
	return resp, endpoint, events
}

// TestHTTPTransportsRefuseBrowsers: both MCP transports refuse what a web
// page of another origin can send (issue 26): a foreign Origin, a Host that
// is not loopback's on a loopback listener, a body that is not
// application/json; they never answer a wildcard CORS header; and nothing
// runs.
func TestHTTPTransportsRefuseBrowsers(t *testing.T) {
	t.Parallel()
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"print(1)"}}}`
	for _, transport := range []Transport{TransportSSE, TransportHTTP} {
		t.Run(string(transport), func(t *testing.T) {
			t.Parallel()
			srv, runs := serveTransport(t, transport, testOptions())
			endpoint := srv.URL + "/mcp"
			var events <-chan string
			if transport == TransportSSE {
				resp, ep, ev := sseSession(t, srv.URL)
				events = ev
				if o := resp.Header.Get("Access-Control-Allow-Origin"); o != "" {
					t.Errorf("GET /sse answers Access-Control-Allow-Origin: %s", o)
				}
				endpoint = ep
				if r, body := doReq(t, "POST", endpoint, map[string]string{"Content-Type": "application/json"}, initializeBody); r.StatusCode != http.StatusAccepted {
					t.Fatalf("initialize without Origin: %s %q", r.Status, body)
				}
			}
			host := strings.TrimPrefix(srv.URL, "http://")
			json := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
			if transport == TransportHTTP {
				r, body := doReq(t, "POST", endpoint, json, initializeBody)
				if r.StatusCode != http.StatusOK {
					t.Fatalf("initialize without Origin: %s %q", r.Status, body)
				}
				json["Mcp-Session-Id"] = r.Header.Get("Mcp-Session-Id")
			}
			with := func(k, v string) map[string]string {
				h := map[string]string{k: v}
				for k, v := range json {
					if _, set := h[k]; !set {
						h[k] = v
					}
				}
				return h
			}
			for _, c := range []struct {
				name, method, url string
				header            map[string]string
				want              int
			}{
				{"foreign origin", "POST", endpoint, with("Origin", "http://127.0.0.1:1"), http.StatusForbidden},
				{"null origin", "POST", endpoint, with("Origin", "null"), http.StatusForbidden},
				{"text/plain", "POST", endpoint, with("Content-Type", "text/plain"), http.StatusUnsupportedMediaType},
				{"form", "POST", endpoint, with("Content-Type", "application/x-www-form-urlencoded"), http.StatusUnsupportedMediaType},
				{"multipart", "POST", endpoint, with("Content-Type", "multipart/form-data; boundary=x"), http.StatusUnsupportedMediaType},
				{"no content type", "POST", endpoint, map[string]string{}, http.StatusUnsupportedMediaType},
				{"rebound Host", "POST", endpoint, with("Host", "rebind.example:"+host[strings.LastIndex(host, ":")+1:]), http.StatusForbidden},
				{"rebound Host, GET", "GET", endpoint, map[string]string{"Host": "rebind.example"}, http.StatusForbidden},
				{"healthz, foreign origin", "GET", srv.URL + "/healthz", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
				{"healthz, rebound Host", "GET", srv.URL + "/healthz", map[string]string{"Host": "rebind.example"}, http.StatusForbidden},
				{"sse, foreign origin", "GET", srv.URL + "/sse", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
				{"preflight, foreign origin", "OPTIONS", endpoint, map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}, http.StatusForbidden},
			} {
				resp, body := doReq(t, c.method, c.url, c.header, call)
				if resp.StatusCode != c.want || resp.Header.Get("Access-Control-Allow-Origin") != "" {
					t.Errorf("%s: %s (Access-Control-Allow-Origin %q) %q, want %d and no CORS", c.name, resp.Status, resp.Header.Get("Access-Control-Allow-Origin"), body, c.want)
				}
			}
			// The same call, as a client that is not a browser sends it, runs.
			resp, body := doReq(t, "POST", endpoint, json, call)
			if resp.StatusCode/100 != 2 {
				t.Errorf("the call without Origin: %s %q", resp.Status, body)
			}
			if events != nil { // over SSE the answer comes on the stream
				for body = range events {
					if strings.Contains(body, `"id":2`) {
						break
					}
				}
			}
			if !strings.Contains(body, "ran") {
				t.Errorf("the call without Origin got %q", body)
			}
			// The refused calls were answered at once, never queued.
			if n := runs.Load(); n != 1 {
				t.Errorf("%d runs, want 1 (the call without Origin)", n)
			}
		})
	}
}

// TestHTTPTransportsServeListedOrigins: a page of an origin listed in
// CODE_EXEC_ALLOWED_ORIGINS gets its preflights answered (before the token
// check: preflights carry none) and may read the answers; the server's own
// origin needs no CORS.
func TestHTTPTransportsServeListedOrigins(t *testing.T) {
	t.Parallel()
	const (
		listed = "http://localhost:6274"
		token  = "0123456789abcdef-token"
	)
	for _, transport := range []Transport{TransportSSE, TransportHTTP} {
		t.Run(string(transport), func(t *testing.T) {
			t.Parallel()
			opts := testOptions()
			opts.AllowedOrigins, opts.AuthToken = []string{listed}, token
			srv, _ := serveTransport(t, transport, opts)
			endpoint := srv.URL + "/mcp"
			if transport == TransportSSE {
				resp, body := doReq(t, "GET", srv.URL+"/sse", map[string]string{"Origin": listed, "Authorization": "Bearer " + token}, "")
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != listed {
					t.Fatalf("GET /sse from %s: %s %v %q", listed, resp.Status, resp.Header, body)
				}
				endpoint = srv.URL + "/message?sessionId=x"
			}
			resp, body := doReq(t, "OPTIONS", endpoint, map[string]string{"Origin": listed, "Access-Control-Request-Method": "POST",
				"Access-Control-Request-Headers": "authorization,content-type,mcp-session-id,mcp-protocol-version"}, "")
			h := resp.Header
			if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != listed ||
				!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") ||
				!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Mcp-Protocol-Version") {
				t.Errorf("preflight from %s: %s %v %q", listed, resp.Status, h, body)
			}
			if transport == TransportHTTP {
				for _, origin := range []string{listed, srv.URL} {
					resp, body := doReq(t, "POST", endpoint, map[string]string{"Origin": origin, "Authorization": "Bearer " + token,
						"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, initializeBody)
					want := ""
					if origin == listed {
						want = listed
					}
					if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != want ||
						(want != "" && !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id")) {
						t.Errorf("initialize from %s: %s %v %q", origin, resp.Status, resp.Header, body)
					}
				}
			}
		})
	}
}
