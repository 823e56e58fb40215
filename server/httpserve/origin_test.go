package httpserve_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/server/httpserve"
)

const listed = "http://localhost:6274"

var testCORS = &httpserve.CORS{
	Methods: []string{"GET", "POST"},
	Headers: []string{"Content-Type", "Mcp-Session-Id"},
	Expose:  []string{"Mcp-Session-Id"},
}

// wildcard is a handler that, like mcp-go's SSE server, lets any origin in.
var wildcard = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	w.Header().Set("Access-Control-Allow-Credentials", "true")
	w.WriteHeader(http.StatusTeapot)
})

// request is a request that reached local (no local address if empty)
// with Host host and the Origin headers origins.
func request(method, local, host string, origins ...string) *http.Request {
	r := httptest.NewRequest(method, "/mcp", nil)
	r.Host = host
	for _, o := range origins {
		r.Header.Add("Origin", o)
	}
	if local != "" {
		addr, _ := net.ResolveTCPAddr("tcp", local)
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, addr))
	}
	return r
}

func TestProtect(t *testing.T) {
	t.Parallel()
	const (
		lo  = "127.0.0.1:8080"
		pub = "10.0.0.5:8080"
	)
	tests := []struct {
		name    string
		req     *http.Request
		noCORS  bool
		want    int    // status
		allowed string // Access-Control-Allow-Origin wanted ("" none)
	}{
		{"no Origin", request("GET", lo, lo), false, http.StatusTeapot, ""},
		{"no Origin, no CORS", request("GET", lo, lo), true, http.StatusTeapot, ""},
		{"own origin", request("POST", lo, lo, "http://127.0.0.1:8080"), false, http.StatusTeapot, ""},
		{"own origin by name", request("POST", lo, "localhost:8080", "http://localhost:8080"), false, http.StatusTeapot, ""},
		{"own origin in capitals", request("POST", lo, "LocalHost:8080", "HTTP://LOCALHOST:8080"), false, http.StatusTeapot, ""},
		{"own origin, default port", request("POST", lo, "localhost", "http://localhost"), false, http.StatusTeapot, ""},
		{"own origin, IPv6", request("POST", "[::1]:8080", "[::1]:8080", "http://[::1]:8080"), false, http.StatusTeapot, ""},
		{"own host, other scheme", request("POST", lo, lo, "https://127.0.0.1:8080"), false, http.StatusForbidden, ""},
		{"own host, other port", request("POST", lo, lo, "http://127.0.0.1:8081"), false, http.StatusForbidden, ""},
		{"own origin by another name", request("POST", lo, lo, "http://localhost:8080"), false, http.StatusForbidden, ""},
		{"listed", request("POST", lo, lo, listed), false, http.StatusTeapot, listed},
		{"listed, GET", request("GET", lo, lo, listed), false, http.StatusTeapot, listed},
		{"listed in capitals", request("POST", lo, lo, "http://LOCALHOST:6274"), false, http.StatusTeapot, listed},
		{"listed, no CORS", request("POST", lo, lo, listed), true, http.StatusTeapot, ""},
		{"foreign", request("POST", lo, lo, "http://127.0.0.1:9999"), false, http.StatusForbidden, ""},
		{"foreign GET", request("GET", lo, lo, "https://evil.example"), false, http.StatusForbidden, ""},
		{"foreign, no CORS", request("GET", lo, lo, "https://evil.example"), true, http.StatusForbidden, ""},
		{"null", request("POST", lo, lo, "null"), false, http.StatusForbidden, ""},
		{"empty", request("POST", lo, lo, ""), false, http.StatusForbidden, ""},
		{"not an origin", request("POST", lo, lo, "127.0.0.1:8080"), false, http.StatusForbidden, ""},
		{"with a path", request("POST", lo, lo, listed+"/"), false, http.StatusForbidden, ""},
		{"own and foreign", request("POST", lo, lo, "http://127.0.0.1:8080", "https://evil.example"), false, http.StatusForbidden, ""},
		{"listed twice", request("POST", lo, lo, listed, listed), false, http.StatusForbidden, ""},
		{"rebound Host", request("GET", lo, "rebind.example:8080"), false, http.StatusForbidden, ""},
		{"rebound Host, own origin by its name", request("POST", lo, "rebind.example:8080", "http://rebind.example:8080"), false, http.StatusForbidden, ""},
		{"rebound Host, IPv6 listener", request("GET", "[::1]:8080", "rebind.example:8080"), false, http.StatusForbidden, ""},
		{"empty Host on loopback", request("GET", lo, ""), false, http.StatusForbidden, ""},
		{"loopback Host, other address", request("GET", lo, "127.0.0.2:8080"), false, http.StatusTeapot, ""},
		{"every interface's address as Host", request("GET", lo, "0.0.0.0:8080"), false, http.StatusTeapot, ""},
		{"every interface's IPv6 address as Host", request("GET", "[::1]:8080", "[::]:8080"), false, http.StatusTeapot, ""},
		{"a private address as Host", request("GET", lo, "192.168.1.5:8080"), false, http.StatusForbidden, ""},
		{"public listener, any Host", request("GET", pub, "codeexec.example:8080"), false, http.StatusTeapot, ""},
		{"public listener, own origin", request("POST", pub, "codeexec.example:8080", "http://codeexec.example:8080"), false, http.StatusTeapot, ""},
		{"public listener, foreign origin", request("POST", pub, "codeexec.example:8080", "https://evil.example"), false, http.StatusForbidden, ""},
		{"no local address", request("GET", "", "rebind.example"), false, http.StatusTeapot, ""},
		{"listed, OPTIONS without preflight", request("OPTIONS", lo, lo, listed), false, http.StatusTeapot, listed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := httpserve.Policy{AllowedOrigins: []string{listed, "not an origin"}, CORS: testCORS}
			if tt.noCORS {
				p.CORS = nil
			}
			rec := httptest.NewRecorder()
			httpserve.Protect(wildcard, p).ServeHTTP(rec, tt.req)
			res := rec.Result()
			if res.StatusCode != tt.want {
				t.Errorf("status %d, want %d (%q)", res.StatusCode, tt.want, rec.Body.String())
			}
			if got := res.Header.Get("Access-Control-Allow-Origin"); got != tt.allowed {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tt.allowed)
			}
			if got := res.Header.Get("Access-Control-Allow-Credentials"); got != "" {
				t.Errorf("Access-Control-Allow-Credentials %q from the handler below went out", got)
			}
			if tt.allowed != "" && res.Header.Get("Access-Control-Expose-Headers") != "Mcp-Session-Id" {
				t.Errorf("Access-Control-Expose-Headers %q, want Mcp-Session-Id", res.Header.Get("Access-Control-Expose-Headers"))
			}
			if varies := strings.Join(res.Header.Values("Vary"), ","); strings.Contains(varies, "Origin") == tt.noCORS && res.StatusCode != http.StatusForbidden {
				t.Errorf("Vary %q with CORS %v", varies, !tt.noCORS)
			}
			if tt.want == http.StatusForbidden {
				body := rec.Body.String()
				if !strings.HasPrefix(body, "403 forbidden: ") || strings.Count(strings.TrimSpace(body), ". ") != 0 {
					t.Errorf("the refusal is not one sentence: %q", body)
				}
			}
		})
	}
}

// TestProtectPreflight: a listed origin's preflight is answered before any
// handler (a token check among them: preflights carry none); a foreign
// origin's is refused; without CORS, the handler below gets it.
func TestProtectPreflight(t *testing.T) {
	t.Parallel()
	preflight := func(origin string) *http.Request {
		r := request("OPTIONS", "127.0.0.1:8080", "127.0.0.1:8080", origin)
		r.Header.Set("Access-Control-Request-Method", "POST")
		r.Header.Set("Access-Control-Request-Headers", "content-type,mcp-session-id")
		return r
	}
	p := httpserve.Policy{AllowedOrigins: []string{listed}, CORS: testCORS}
	rec := httptest.NewRecorder()
	httpserve.Protect(wildcard, p).ServeHTTP(rec, preflight(listed))
	h := rec.Result().Header
	if rec.Code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != listed ||
		h.Get("Access-Control-Allow-Methods") != "GET, POST" || h.Get("Access-Control-Allow-Headers") != "Content-Type, Mcp-Session-Id" ||
		h.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("listed origin's preflight: %d %v", rec.Code, h)
	}
	rec = httptest.NewRecorder()
	httpserve.Protect(wildcard, p).ServeHTTP(rec, preflight("http://127.0.0.1:9999"))
	if rec.Code != http.StatusForbidden || rec.Result().Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("foreign origin's preflight: %d %v", rec.Code, rec.Result().Header)
	}
	p.CORS = nil
	rec = httptest.NewRecorder()
	httpserve.Protect(wildcard, p).ServeHTTP(rec, preflight(listed))
	if rec.Code != http.StatusTeapot || rec.Result().Header.Get("Access-Control-Allow-Methods") != "" || rec.Result().Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight without CORS: %d %v", rec.Code, rec.Result().Header)
	}
}

// TestProtectStreams: a stream (SSE) flushes through Protect, and the
// wildcard its handler set is gone before the first flush.
func TestProtectStreams(t *testing.T) {
	t.Parallel()
	h := httpserve.Protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Access-Control-Allow-Origin", "*")
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("the writer handed down is not an http.Flusher")
			return
		}
		f.Flush()
		_, _ = w.Write([]byte("event: endpoint\ndata: /message\n\n"))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("http.ResponseController cannot flush: %v", err)
		}
	}), httpserve.Policy{CORS: testCORS})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("GET", "127.0.0.1:8080", "127.0.0.1:8080"))
	if !rec.Flushed || rec.Result().Header.Get("Access-Control-Allow-Origin") != "" || !strings.Contains(rec.Body.String(), "endpoint") {
		t.Errorf("flushed %v, header %v, body %q", rec.Flushed, rec.Result().Header, rec.Body.String())
	}
}

// TestProtectLogs: each refusal is logged with what was refused.
func TestProtectLogs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := httpserve.Protect(wildcard, httpserve.Policy{Log: slog.New(slog.NewTextHandler(&buf, nil))})
	h.ServeHTTP(httptest.NewRecorder(), request("POST", "127.0.0.1:8080", "127.0.0.1:8080", "https://evil.example"))
	h.ServeHTTP(httptest.NewRecorder(), request("GET", "127.0.0.1:8080", "rebind.example:8080"))
	for _, want := range []string{"origin=https://evil.example", "host=rebind.example:8080"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, buf.String())
		}
	}
}

func TestRequireJSON(t *testing.T) {
	t.Parallel()
	h := httpserve.RequireJSON(wildcard)
	tests := []struct {
		method, contentType string
		want                int
	}{
		{"POST", "application/json", http.StatusTeapot},
		{"POST", "application/json; charset=utf-8", http.StatusTeapot},
		{"POST", "Application/JSON;charset=UTF-8", http.StatusTeapot},
		{"POST", "text/plain", http.StatusUnsupportedMediaType},
		{"POST", "text/plain; charset=utf-8", http.StatusUnsupportedMediaType},
		{"POST", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"POST", "multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"POST", "application/jsonx", http.StatusUnsupportedMediaType},
		{"POST", "application/json-seq", http.StatusUnsupportedMediaType},
		{"POST", "application/json;", http.StatusTeapot},
		{"POST", "application/json; charset", http.StatusUnsupportedMediaType}, // does not parse
		{"POST", "", http.StatusUnsupportedMediaType},
		{"GET", "", http.StatusTeapot},
		{"DELETE", "", http.StatusTeapot},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, "/mcp", strings.NewReader("{}"))
		if tt.contentType != "" {
			r.Header.Set("Content-Type", tt.contentType)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != tt.want {
			t.Errorf("%s with Content-Type %q: %d, want %d", tt.method, tt.contentType, rec.Code, tt.want)
		}
		if tt.want == http.StatusUnsupportedMediaType && !strings.Contains(rec.Body.String(), "Content-Type: application/json") {
			t.Errorf("%s with Content-Type %q: the answer %q does not say what to send", tt.method, tt.contentType, rec.Body.String())
		}
	}
}

func TestParseOrigin(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"http://localhost:6274":         "http://localhost:6274",
		"HTTP://LocalHost:6274":         "http://localhost:6274",
		"https://app.example.com":       "https://app.example.com",
		"https://app.example.com:443":   "https://app.example.com",
		"http://app.example.com:80":     "http://app.example.com",
		"http://app.example.com:443":    "http://app.example.com:443",
		"https://app.example.com:8443":  "https://app.example.com:8443",
		"http://127.0.0.1:08080":        "http://127.0.0.1:8080",
		"http://[::1]:8080":             "http://[::1]:8080",
		"http://[::1]":                  "http://[::1]",
		"http://[0:0:0:0:0:0:0:1]:8080": "http://[0:0:0:0:0:0:0:1]:8080",
	}
	for in, want := range good {
		if got, err := httpserve.ParseOrigin(in); err != nil || got != want {
			t.Errorf("ParseOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", "*", "null", "localhost:6274", "localhost", "//localhost:6274", "ftp://example.com", "file:///tmp",
		"http://", "http://:8080", "http://example.com/", "http://example.com/app", "http://example.com?x",
		"http://example.com?", "http://example.com#x", "http://example.com#", "http://user@example.com",
		"http://example.com:", "http://example.com:0", "http://example.com:65536", "http://example.com:http",
		"http://[zz::1]:8080", " http://example.com", "http://exa mple.com", "http://*.example.com",
	} {
		if got, err := httpserve.ParseOrigin(bad); err == nil {
			t.Errorf("ParseOrigin(%q) = %q, want an error", bad, got)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:8080": true, "127.1.2.3:1": true, "::1": true, "[::1]": true, "[::1]:8080": true,
		"localhost": true, "LOCALHOST:8080": true,
		"": false, "0.0.0.0": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false,
		"example.com": false, "localhost.example.com:8080": false, "rebind.test:8080": false, "127.0.0.1.nip.io": false,
	} {
		if got := httpserve.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
