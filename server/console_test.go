package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/approvals/audit"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

const testAdminToken = "0123456789abcdef-admin"

// adminFixture is a Gate with an audit log, served by an Admin on a
// loopback httptest server, with allowedOrigins.
type adminFixture struct {
	gate  *approvals.Gate
	srv   *httptest.Server
	audit string
}

func newAdminFixture(t *testing.T, token string, allowedOrigins ...string) adminFixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	rec := audit.Wrap(&sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}, log, slog.New(slog.DiscardHandler))
	gate := approvals.NewGate(rec,
		approvals.GateConfig{Policy: approvals.PolicyAlways, Timeout: time.Minute, Record: rec, OutOfBand: true, WaitInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { gate.Close() })
	admin := NewAdmin(gate, log, token, slog.New(slog.DiscardHandler))
	admin.LongPoll = 2 * time.Second
	admin.AllowedOrigins = allowedOrigins
	srv := httptest.NewServer(admin.Handler())
	t.Cleanup(srv.Close)
	return adminFixture{gate: gate, srv: srv, audit: path}
}

// startRun starts a run that waits for approval and returns its result channel
// once the request is pending.
func (f adminFixture) startRun(t *testing.T, code string) (approvals.Ask, chan error) {
	t.Helper()
	errc := make(chan error, 1)
	ctx := approvals.WithCall(context.Background(), approvals.Call{Requester: approvals.Requester{Client: "test-client 1.0", Transport: "stdio"}})
	go func() {
		_, err := f.gate.Run(ctx, sandbox.Request{Language: "python", Code: code, Limits: sandbox.Limits{Timeout: time.Second}})
		errc <- err
	}()
	// The broker's changes wake the wait; the minute only bounds a hang.
	wait, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for v := uint64(0); wait.Err() == nil; {
		var asks []approvals.Ask
		if asks, v = f.gate.Broker().Changes(wait, v); len(asks) > 0 {
			return asks[0], errc
		}
	}
	t.Fatal("the run never became pending")
	return approvals.Ask{}, nil
}

// doReq sends a request with the headers hdr (Host included) and returns
// the response with its body, or "(an event stream)" for a stream, which
// would not end.
func doReq(t *testing.T, method, url string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range hdr {
		if strings.EqualFold(k, "host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, "(an event stream)"
	}
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp, b.String()
}

// TestAdminOrigins: the console shares the rule every listener applies to
// browsers: its own origin and listed ones pass, any other Origin ("null"
// included) is refused on every path, reads too, and so is a Host that is
// not loopback's.
func TestAdminOrigins(t *testing.T) {
	t.Parallel()
	const listed = "http://localhost:6274"
	f := newAdminFixture(t, testAdminToken, listed)
	auth := "Bearer " + testAdminToken
	approve := f.srv.URL + "/api/requests/no-such-id/approve"
	for _, c := range []struct {
		method, url string
		hdr         map[string]string
		want        int
	}{
		{"GET", f.srv.URL + "/", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"GET", f.srv.URL + "/api/pending", map[string]string{"Origin": "https://evil.example", "Authorization": auth}, http.StatusForbidden},
		{"GET", f.srv.URL + "/api/pending", map[string]string{"Host": "rebind.example", "Authorization": auth}, http.StatusForbidden},
		{"POST", approve, map[string]string{"Origin": "null", "Authorization": auth, AdminHeader: "console"}, http.StatusForbidden},
		{"POST", approve, map[string]string{"Origin": "http://127.0.0.1:1", "Authorization": auth, AdminHeader: "console"}, http.StatusForbidden},
		// Past the origin check: the request is unknown.
		{"POST", approve, map[string]string{"Origin": f.srv.URL, "Authorization": auth, AdminHeader: "console"}, http.StatusNotFound},
		{"POST", approve, map[string]string{"Origin": listed, "Authorization": auth, AdminHeader: "console"}, http.StatusNotFound},
		{"POST", approve, map[string]string{"Authorization": auth, AdminHeader: "cli"}, http.StatusNotFound},
		{"GET", f.srv.URL + "/api/pending", map[string]string{"Origin": listed, "Authorization": auth}, http.StatusOK},
	} {
		resp, body := doReq(t, c.method, c.url, c.hdr, "")
		if resp.StatusCode != c.want || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s %s with %v: %d (Access-Control-Allow-Origin %q) %q, want %d and no CORS", c.method, c.url, c.hdr, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), body, c.want)
		}
	}
}

func TestAdminConsoleHeaders(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, testAdminToken)
	resp, body := doReq(t, "GET", f.srv.URL+"/", nil, "")
	if resp.StatusCode != 200 || !strings.Contains(body, "codeexec approvals") {
		t.Fatalf("GET / = %d %q", resp.StatusCode, body)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"frame-ancestors 'none'", "script-src 'self'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("missing anti-framing or nosniff headers: %v", resp.Header)
	}
	if strings.Contains(body, "<script>") || strings.Contains(string(consoleJS), "innerHTML") {
		t.Error("the console must not use inline scripts or innerHTML")
	}
}

// TestAdminAlwaysNeedsAToken: on loopback too, and with a loopback Host,
// the API answers 401 without the token; an Admin made without a token
// refuses everything.
func TestAdminAlwaysNeedsAToken(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, testAdminToken)
	for _, hdr := range []map[string]string{nil, {"Host": "127.0.0.1"}, {"Authorization": "Bearer "}, {"Authorization": "Bearer wrong-token-0123456789"}} {
		if resp, _ := doReq(t, "GET", f.srv.URL+"/api/pending", hdr, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /api/pending with %v: %d, want 401", hdr, resp.StatusCode)
		}
		post := map[string]string{AdminHeader: "cli"}
		for k, v := range hdr {
			post[k] = v
		}
		if resp, _ := doReq(t, "POST", f.srv.URL+"/api/requests/abc/approve", post, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST approve with %v: %d, want 401", hdr, resp.StatusCode)
		}
	}
	open := newAdminFixture(t, "")
	for _, auth := range []string{"", "Bearer ", "Bearer x"} {
		if resp, _ := doReq(t, "GET", open.srv.URL+"/api/pending", map[string]string{"Authorization": auth}, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("an Admin without a token answered %q with %d, want 401", auth, resp.StatusCode)
		}
	}
}

func TestAdminApproveAndDeny(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, testAdminToken)
	auth := map[string]string{"Authorization": "Bearer " + testAdminToken}
	ask, errc := f.startRun(t, "print('<img src=x onerror=alert(1)>')")

	// Without the token: 401.
	if resp, _ := doReq(t, "GET", f.srv.URL+"/api/pending", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	if resp, _ := doReq(t, "GET", f.srv.URL+"/api/pending", map[string]string{"Authorization": "Bearer wrong-token-xxxxxxxx"}, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", resp.StatusCode)
	}
	// The list shows the code, reasons and requester.
	resp, body := doReq(t, "GET", f.srv.URL+"/api/pending", auth, "")
	var list PendingList
	if err := json.Unmarshal([]byte(body), &list); err != nil || resp.StatusCode != 200 || len(list.Pending) != 1 {
		t.Fatalf("GET /api/pending = %d %s", resp.StatusCode, body)
	}
	if got := list.Pending[0]; got.ID != ask.ID || got.Code != ask.Code || got.Requester.Client != "test-client 1.0" || got.Language != "python" {
		t.Fatalf("pending entry = %+v", got)
	}
	approveURL := f.srv.URL + "/api/requests/" + ask.ID + "/approve"
	// CSRF: no custom header, or a foreign origin, is refused.
	if resp, _ := doReq(t, "POST", approveURL, auth, ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST without %s: %d", AdminHeader, resp.StatusCode)
	}
	hdr := map[string]string{"Authorization": auth["Authorization"], AdminHeader: "console", "Origin": "http://evil.example"}
	if resp, _ := doReq(t, "POST", approveURL, hdr, ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin POST: %d", resp.StatusCode)
	}
	select {
	case err := <-errc:
		t.Fatalf("the run ended before anyone approved it: %v", err)
	default:
	}
	// Approve.
	hdr["Origin"] = f.srv.URL
	resp, body = doReq(t, "POST", approveURL, hdr, `{"by":"alice"}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"outcome":"approved"`) {
		t.Fatalf("approve = %d %s", resp.StatusCode, body)
	}
	if err := <-errc; err != nil {
		t.Fatalf("approved run: %v", err)
	}
	// A second answer is refused: the first stands.
	if resp, _ := doReq(t, "POST", f.srv.URL+"/api/requests/"+ask.ID+"/deny", hdr, ""); resp.StatusCode != http.StatusConflict {
		t.Fatalf("second answer: %d, want 409", resp.StatusCode)
	}

	// Deny another.
	ask2, errc2 := f.startRun(t, "print(2)")
	resp, body = doReq(t, "POST", f.srv.URL+"/api/requests/"+ask2.ID+"/deny", hdr, `{"by":"bob","note":"no"}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"outcome":"denied"`) {
		t.Fatalf("deny = %d %s", resp.StatusCode, body)
	}
	var de *approvals.DeniedError
	if err := <-errc2; !errors.As(err, &de) || !strings.Contains(de.Sentence(), "bob") {
		t.Fatalf("denied run: %v", err)
	}
	// The console shows what was decided and how the runs ended.
	if resp, _ := doReq(t, "GET", f.srv.URL+"/api/recent", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/recent without the token: %d", resp.StatusCode)
	}
	resp, body = doReq(t, "GET", f.srv.URL+"/api/recent", auth, "")
	var recent RecentList
	if err := json.Unmarshal([]byte(body), &recent); err != nil || resp.StatusCode != 200 || len(recent.Recent) != 2 {
		t.Fatalf("GET /api/recent = %d %s", resp.StatusCode, body)
	}
	latest, first := recent.Recent[0], recent.Recent[1]
	if latest.ID != ask2.ID || len(latest.Decisions) != 1 || latest.Decisions[0].Outcome != approvals.OutcomeDenied || latest.Run != nil || latest.Request.Code != "print(2)" {
		t.Errorf("latest = %+v", latest)
	}
	if first.ID != ask.ID || len(first.Decisions) != 1 || first.Decisions[0].Outcome != approvals.OutcomeApproved || !strings.HasPrefix(first.Decisions[0].By, "alice") || first.Run == nil || first.Run.ExitCode == nil {
		t.Errorf("first = %+v", first)
	}
	log, _ := os.ReadFile(f.audit)
	if !strings.Contains(string(log), `"by":"alice (console from 127.0.0.1:`) || !strings.Contains(string(log), `"outcome":"denied","by":"bob (console`) {
		t.Fatalf("audit log does not say who decided:\n%s", log)
	}
}

// TestApproverViewsShowHiddenCharacters: what the approver reads outside
// the console's page is escaped too. The console's script escapes exactly
// the characters of approvals.Hidden, and the elicitation message shows
// every file's text and stdin, with hidden characters escaped in them, the
// code, the file names and the client's name.
func TestApproverViewsShowHiddenCharacters(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, testAdminToken)
	_, script := doReq(t, "GET", f.srv.URL+"/console.js", nil, "")
	if !strings.Contains(script, `\u{2028}-\u{202F}`) || !strings.Contains(script, `\u{2066}-\u{206F}`) || !strings.Contains(script, `\u{E0000}-\u{E007F}`) || !strings.Contains(script, "const HIDDEN = /[") {
		t.Errorf("the console's script does not define the hidden characters:\n%.300s", script)
	}

	a := approvals.Ask{ID: "abc", Language: "python", CodeSHA256: "00", Deadline: time.Now(),
		Code:      "if access != \"none\u202e \u2066# admins only\u2069 \u2066\":\n    print('admin')\n",
		Requester: approvals.Requester{Client: "evil\x1b[2K\ralice's laptop (verified)"},
		Stdin:     "yes\u200b\n", StdinBytes: 7,
		Files: []approvals.AskFile{
			{Path: "invoice\u202efdp.py", Size: 17, SHA256: strings.Repeat("ab", 32), Text: "print('invoice')\n"},
			{Path: "tool.so", Size: 64, SHA256: strings.Repeat("cd", 32), Binary: true, Kind: "an ELF executable or library"},
		}}
	msg := elicitation(a).Message
	for _, r := range msg {
		if approvals.Hidden(r) {
			t.Errorf("the elicitation message holds the raw character %U:\n%s", r, msg)
			break
		}
	}
	for _, want := range []string{
		"evil⟨U+001B⟩[2K⟨U+000D⟩alice's laptop (verified)",
		"if access != \"none⟨U+202E⟩ ⟨U+2066⟩# admins only⟨U+2069⟩ ⟨U+2066⟩\":",
		"- invoice⟨U+202E⟩fdp.py (17 bytes, sha256 abababababababab):\n```\nprint('invoice')\n```",
		"- tool.so (64 bytes, sha256 cdcdcdcdcdcdcdcd), binary, not shown: an ELF executable or library",
		"yes⟨U+200B⟩",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the elicitation message lacks %q:\n%s", want, msg)
		}
	}
}
