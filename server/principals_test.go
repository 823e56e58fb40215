package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/sandbox/sessions"
	"github.com/codeexec/codeexec/server/principals"
	"github.com/codeexec/codeexec/server/tasks"
)

const (
	tokenA = "token-of-principal-a-0123456789"
	tokenB = "token-of-principal-b-0123456789"
)

// twoPrincipals is the registry of principals a (acme) and b (globex).
func twoPrincipals(t *testing.T) *principals.Registry {
	t.Helper()
	hash := func(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }
	path := filepath.Join(t.TempDir(), "principals.yaml")
	content := fmt.Sprintf("principals:\n  - name: a\n    org: acme\n    token_sha256: %s\n  - name: b\n    org: globex\n    token_sha256: %s\n", hash(tokenA), hash(tokenB))
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	reg, err := principals.Load(principals.FileConfig{Path: path, Defaults: principals.Defaults{
		Languages: o.Languages, MaxSessions: 8, MaxTimeout: o.MaxTimeout, Memory: o.Limits.MemoryBytes, CPUs: o.Limits.CPUs, MaxConcurrency: o.MaxConcurrency,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// bearer is the header of a request with token.
func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

// modernAs posts a 2026-07-28 request of method as the principal of token.
func (ts *taskServer) modernAs(token, method, params string, withTasks bool) (map[string]any, map[string]any) {
	ts.t.Helper()
	params = strings.TrimSuffix(params, "}")
	if params != "{" {
		params += ","
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":%s"_meta":%s}}`, method, params, modernMeta(withTasks))
	var p struct{ Name, TaskID, URI string }
	_ = json.Unmarshal([]byte(params+`"x":0}`), &p)
	res, rerr, _ := ts.rpc("2026-07-28", "", body, append(bearer(token), "Mcp-Method", method, "Mcp-Name", p.Name+p.TaskID+p.URI)...)
	return res, rerr
}

// TestArtifactsOfClientsWithoutASessionArePrincipals: on protocol
// 2026-07-28, which has no MCP sessions, a run's artifacts belong to its
// principal: another principal that holds the URI gets exactly the answer
// of an artifact that does not exist (before principals, any client that
// knew the URI could read them).
func TestArtifactsOfClientsWithoutASessionArePrincipals(t *testing.T) {
	t.Parallel()
	blob := make([]byte, 3000)
	for i := range blob {
		blob[i] = byte(i)
	}
	art := artifact("blob.bin", blob, artifacts.Options{})
	runner := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Languages: []sandbox.LanguageStatus{{Name: "python", Available: true}}},
		RunFunc: func(context.Context, sandbox.Request) (*sandbox.Result, error) {
			return &sandbox.Result{Sandbox: sandbox.ModeProcess, Artifacts: &artifacts.Collection{Artifacts: []artifacts.Artifact{art}}}, nil
		}}
	ts := newTaskServerWith(t, runner, tasks.Config{}, func(o *Options) {
		o.Principals = twoPrincipals(t)
		// One run's artifact fills the store: the next pushes it out.
		o.Store = artifacts.NewStore(time.Hour, 4000)
	})
	run := func() string {
		res, rerr := ts.modernAs(tokenA, "tools/call", `{"name":"code_execute","arguments":{"language":"python","code":"x"}}`, false)
		if rerr != nil {
			t.Fatalf("tools/call: %v", rerr)
		}
		b, _ := json.Marshal(res["structuredContent"])
		var out ExecuteOutput
		_ = json.Unmarshal(b, &out)
		if len(out.Artifacts) != 1 || out.Artifacts[0].URI == "" {
			t.Fatalf("the run kept no artifact: %s", b)
		}
		return out.Artifacts[0].URI
	}
	read := func(token, uri string) (map[string]any, string) {
		res, rerr := ts.modernAs(token, "resources/read", fmt.Sprintf(`{"uri":%q}`, uri), false)
		b, _ := json.Marshal(rerr)
		return res, string(b)
	}
	uri := run()
	if res, rerr := read(tokenA, uri); res == nil {
		t.Fatalf("principal a cannot read its own artifact: %s", rerr)
	}
	res, foreign := read(tokenB, uri)
	if res != nil {
		t.Fatalf("principal b read principal a's artifact %s", uri)
	}
	run()
	if res, _ := read(tokenA, uri); res != nil {
		t.Fatal("the first artifact is still kept after the second run's filled the store")
	}
	if _, unknown := read(tokenB, uri); foreign != unknown {
		t.Errorf("another principal's artifact answered\n%s\nand one that does not exist\n%s", foreign, unknown)
	}
}

// TestMCPSessionsArePrincipals: an MCP session id works only for the
// principal that opened it; another's request with it, over streamable
// HTTP (POST, GET, DELETE) and SSE, is answered exactly as one with an id
// that does not exist, and the session goes on.
func TestMCPSessionsArePrincipals(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.Principals = twoPrincipals(t)
	// An id of the right form that this server never made.
	other := newSessionIDs("").generate("b")

	t.Run("streamable", func(t *testing.T) {
		srv, runs := serveTransport(t, TransportHTTP, opts)
		ts := &taskServer{t: t, url: srv.URL + "/mcp"}
		_, rerr, hdr := ts.rpc("2025-06-18", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`, bearer(tokenA)...)
		id := hdr.Get("Mcp-Session-Id")
		if rerr != nil || id == "" {
			t.Fatalf("initialize: %v, session %q", rerr, id)
		}
		answer := func(method, session, token string) string {
			return send(t, method, ts.url, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`,
				"Accept", "application/json, text/event-stream", "Mcp-Protocol-Version", "2025-06-18", "Mcp-Session-Id", session, "Authorization", "Bearer "+token)
		}
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			foreign, unknown := answer(method, id, tokenB), answer(method, other, tokenB)
			if foreign != unknown || !strings.HasPrefix(foreign, "404") {
				t.Errorf("%s by principal b with a's session: %q; with an unknown one: %q", method, foreign, unknown)
			}
		}
		if got := answer(http.MethodPost, id, tokenA); !strings.HasPrefix(got, "200") || !strings.Contains(got, "code_execute") {
			t.Errorf("principal a's own session after b's tries: %q", got)
		}
		if n := runs.Load(); n != 0 {
			t.Errorf("%d runs happened", n)
		}
	})

	t.Run("sse", func(t *testing.T) {
		srv, runs := serveTransport(t, TransportSSE, opts)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/sse", nil)
		req.Header.Set("Authorization", "Bearer "+tokenA)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		endpoint := ""
		for endpoint == "" && sc.Scan() {
			if d, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "data: "); ok {
				endpoint = d
			}
		}
		i := strings.Index(endpoint, "sessionId=")
		if i < 0 {
			t.Fatalf("no session in the endpoint %q", endpoint)
		}
		id := endpoint[i+len("sessionId="):]
		post := func(session, token string) string {
			return send(t, http.MethodPost, srv.URL+"/message?sessionId="+session,
				`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"x"}}}`, "Authorization", "Bearer "+token)
		}
		foreign, unknown := post(id, tokenB), post(other, tokenB)
		if foreign != unknown || !strings.Contains(foreign, "Invalid session ID") {
			t.Errorf("principal b's message to a's SSE session: %q; to an unknown one: %q", foreign, unknown)
		}
		if n := runs.Load(); n != 0 {
			t.Errorf("%d runs happened", n)
		}
	})
}

// send sends a JSON body with headers (name, value, ...) and returns the
// answer's status, headers (but Date) and body.
func send(t *testing.T, method, url, body string, headers ...string) string {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	resp.Header.Del("Date")
	return fmt.Sprint(resp.Status, " ", resp.Header, " ", string(b))
}

// TestSessionIDs: a session id is valid for the principal it was made for,
// and for nobody else.
func TestSessionIDs(t *testing.T) {
	t.Parallel()
	b := newSessionIDs("")
	id := b.generate("alice")
	if !strings.HasPrefix(id, "mcp-session-") || !b.valid("alice", id) || b.valid("bob", id) {
		t.Errorf("id %q: valid for alice %v, for bob %v", id, b.valid("alice", id), b.valid("bob", id))
	}
	if newSessionIDs("").valid("alice", id) {
		t.Error("another server's key accepts the id")
	}
	for _, bad := range []string{"", "mcp-session-", id + "0", strings.Replace(id, "-", "", 2), "mcp-session-" + strings.Repeat("0", 65)} {
		if b.valid("alice", bad) {
			t.Errorf("%q is valid", bad)
		}
	}
}

// principalNamed parses one principal with the fields of yaml (indented by
// four spaces) over the server-wide settings of testOptions, with
// sessions, packages and the network allowlist allow.
func principalNamed(t *testing.T, name, yaml string, allow ...string) *principals.Principal {
	t.Helper()
	o := testOptions()
	d := principals.Defaults{Languages: o.Languages, MaxSessions: 8, Packages: true, MaxTimeout: o.MaxTimeout,
		Memory: o.Limits.MemoryBytes, CPUs: o.Limits.CPUs, MaxConcurrency: o.MaxConcurrency}
	if len(allow) > 0 {
		d.Allowlist, _ = egress.ParseAllowlist(allow)
	}
	list, err := principals.Parse([]byte("principals:\n  - name: "+name+"\n    org: acme\n    token_sha256: "+strings.Repeat("ab", 32)+"\n"+yaml), d)
	if err != nil {
		t.Fatal(err)
	}
	return list[0]
}

// TestPrincipalSessions: a principal's max_sessions caps its sessions
// whichever MCP client makes them, and 0 refuses sessions; a session it
// makes reaches only its network.
func TestPrincipalSessions(t *testing.T) {
	t.Parallel()
	var specs []sessions.Spec
	var mu sync.Mutex
	m := sessions.New(sessions.Config{Backend: backendFunc(func(_ context.Context, spec sessions.Spec) (sessions.Session, error) {
		mu.Lock()
		specs = append(specs, spec)
		mu.Unlock()
		return echoSession{}, nil
	}), MaxSessions: 8, IdleTimeout: time.Minute, MaxLifetime: time.Hour})
	t.Cleanup(func() { _ = m.Shutdown() })
	opts := testOptions()
	opts.Sessions, opts.SessionIdleTimeout = m, time.Minute
	s := New(sessions.Route(m, &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}), opts)

	one := principalNamed(t, "one", "    max_sessions: 1\n    network: none\n", "api.example.com")
	none := principalNamed(t, "nosessions", "    max_sessions: 0\n", "api.example.com")
	client := func(p *principals.Principal, id string) context.Context {
		return principals.WithPrincipal(s.mcp.WithContext(context.Background(), fakeSession{id: id}), p)
	}
	if res, _ := s.handleSessionCreate(client(one, "c1"), toolCall(ToolSessionCreate, map[string]any{})); res.IsError {
		t.Fatalf("the first session of principal one: %s", resultText(res))
	}
	res, _ := s.handleSessionCreate(client(one, "c2"), toolCall(ToolSessionCreate, map[string]any{}))
	if want := "Too many sessions: principal one's max_sessions allows at most 1 at once and 1 exist. Close a session you no longer need with session_close, or wait for an idle one to expire."; !res.IsError || resultText(res) != want {
		t.Errorf("principal one's second session, from another client: %q, want %q", resultText(res), want)
	}
	res, _ = s.handleSessionCreate(client(none, "c3"), toolCall(ToolSessionCreate, map[string]any{}))
	if want := "Principal nosessions may not use sessions (its max_sessions: 0), so the request was refused: run without a session."; !res.IsError || resultText(res) != want {
		t.Errorf("a principal without sessions: %q, want %q", resultText(res), want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(specs) != 1 || specs[0].Network == nil || len(specs[0].Network.Rules()) != 0 {
		t.Errorf("sessions started: %+v, want one with an empty allowlist", specs)
	}
}

type backendFunc func(context.Context, sessions.Spec) (sessions.Session, error)

func (f backendFunc) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	return f(ctx, spec)
}

// TestInfoIsThePrincipals: sandbox_info tells a principal its own
// languages, limits, network, files and packages.
func TestInfoIsThePrincipals(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, nil)
	s.opts.Packages = fakePackages{info: packages.Info{Enabled: true}}
	p := principalNamed(t, "narrow", "    languages: [python]\n    files: none\n    packages: false\n    max_timeout: 5s\n    memory: 64m\n    cpus: 0.5\n    max_concurrent: 2\n    runs_per_minute: 30\n")
	info := s.infoFor(p)
	if info.Principal == nil || info.Principal.Name != "narrow" || info.Principal.Org != "acme" || info.Principal.Files != "none" ||
		info.Principal.MaxConcurrent != 2 || info.Principal.RunsPerMinute != 30 {
		t.Errorf("principal: %+v", info.Principal)
	}
	l := info.Limits
	if l.MaxTimeoutSeconds != 5 || l.DefaultTimeoutSeconds != 5 || l.MemoryBytes != 64<<20 || l.CPUs != 0.5 || l.MaxFiles != 0 || l.MaxArtifacts != 0 {
		t.Errorf("limits: %+v", l)
	}
	if !strings.Contains(info.Packages.Detail, "off for principal narrow") || info.Packages.Enabled {
		t.Errorf("packages: %+v", info.Packages)
	}
}
