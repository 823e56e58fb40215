package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestPrincipals is the acceptance test of CODE_EXEC_PRINCIPALS_FILE, over
// streamable HTTP with the official MCP client and the real binary, in mode
// none and process mode: two principals, "limited" (python only, one
// request at a time, no network) and "full"; the first's javascript call
// and its second concurrent call are refused with clear messages while the
// second principal's calls run; neither can see or use the other's
// session, artifact, task or MCP session (answered exactly as an id that
// does not exist); the audit log names each; a changed file changes a
// limit without a restart, and a bad one keeps the previous; a run's token
// names its principal, and a tampered or expired one fails codeexec token
// verify.
func TestPrincipals(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"none", "process"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testPrincipals(t, mode)
		})
	}
}

// principalsFile writes the principals of the test: limited (acme) with
// the fields of limited, and full (globex) with the server-wide settings.
func principalsFile(t *testing.T, path, limitedToken, fullToken, limited string) {
	t.Helper()
	hash := func(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }
	content := fmt.Sprintf("principals:\n  - name: limited\n    org: acme\n    token_sha256: %s\n%s  - name: full\n    org: globex\n    token_sha256: %s\n    max_concurrent: 4\n",
		hash(limitedToken), limited, hash(fullToken))
	// Replace the file at once, as an editor does.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const limitedPolicy = "    languages: [python]\n    max_concurrent: 1\n    network: none\n    max_sessions: 1\n"

func testPrincipals(t *testing.T, mode string) {
	dir := t.TempDir()
	file, auditLog := filepath.Join(dir, "principals.yaml"), filepath.Join(dir, "audit.jsonl")
	limitedToken, fullToken := "limited-"+newSecret(t), "full-"+newSecret(t)
	principalsFile(t, file, limitedToken, fullToken, limitedPolicy)
	key := newSecret(t) + newSecret(t)
	e := sandboxtest.StartEgress(t, "127.0.0.1")
	env := map[string]string{
		"CODE_EXEC_SANDBOX":         mode,
		"CODE_EXEC_PRINCIPALS_FILE": file,
		"CODE_EXEC_AUDIT_LOG":       auditLog,
		"CODE_EXEC_RUN_TOKEN_KEY":   key,
		"CODE_EXEC_TIMEOUT":         "30s",
		// One run's artifacts fill the store: the next run's push them
		// out, so that an artifact can be made to not exist.
		"CODE_EXEC_MAX_ARTIFACT_BYTES":   "64k",
		"CODE_EXEC_ARTIFACT_STORE_BYTES": "64k",
	}
	// Without user namespaces an ordinary user's process-mode runs have
	// no network namespace, and the server refuses an allowlist
	// (TestNetworkAllowlist checks that): the network part is skipped.
	network := !(mode == "process" && os.Getenv("CODE_EXEC_TEST_NO_USERNS") == "1" && os.Geteuid() != 0)
	if network {
		env["CODE_EXEC_NETWORK"] = "allowlist"
		env["CODE_EXEC_NETWORK_ALLOW"] = strings.Join(e.Allow(), ",")
		env["CODE_EXEC_NETWORK_RESOLVE"] = e.Resolve()
		env["CODE_EXEC_NETWORK_ALLOW_PRIVATE"] = "true"
	}
	s := startHTTP(t, http_, serverEnv(t, env))
	if _, err := dialErr(t, s, connectOpts{token: "nobody-" + newSecret(t)}); err == nil {
		t.Fatal("a client with no principal's token connected")
	}
	limited := dial(t, s, connectOpts{token: limitedToken, clientName: "agent-limited"})
	full := dial(t, s, connectOpts{token: fullToken, clientName: "agent-full"})

	t.Run("sandbox_info", func(t *testing.T) {
		var info struct {
			Principal struct{ Name, Org string } `json:"principal"`
			Languages []struct {
				Name      string `json:"name"`
				Available bool   `json:"available"`
				Reason    string `json:"reason"`
			} `json:"languages"`
			NetworkPolicy *egress.PolicyInfo `json:"network_policy"`
		}
		remarshal(t, call(t, limited, "sandbox_info", map[string]any{}).StructuredContent, &info)
		if info.Principal.Name != "limited" || info.Principal.Org != "acme" || network && (info.NetworkPolicy == nil || len(info.NetworkPolicy.Allow) != 0) {
			t.Errorf("limited's sandbox_info: principal %+v, network %+v", info.Principal, info.NetworkPolicy)
		}
		for _, l := range info.Languages {
			if l.Name == "javascript" && (l.Available || !strings.Contains(l.Reason, "principal limited")) {
				t.Errorf("limited's sandbox_info says of javascript: %+v", l)
			}
		}
	})

	t.Run("languages", func(t *testing.T) {
		res := call(t, limited, "code_execute", map[string]any{"language": "javascript", "code": "console.log(1)"})
		if want := "Principal limited may not run javascript code (its languages: python), so the request was refused: use python."; !res.IsError || text(res) != want {
			t.Errorf("limited's javascript: isError=%v %q, want %q", res.IsError, text(res), want)
		}
		res, out := execute(t, full, map[string]any{"language": "javascript", "code": "console.log(6*7)"})
		if res.IsError || out.Stdout != "42\n" {
			t.Errorf("full's javascript: isError=%v %q %q", res.IsError, out.Stdout, out.Stderr)
		}
	})

	t.Run("concurrency", func(t *testing.T) {
		m := marker()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		first := make(chan error, 1)
		go func() {
			_, err := limited.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
				"language": "python", "code": fmt.Sprintf("import os\nos.execvp('sleep', ['sleep', %q])", m)}})
			first <- err
		}()
		waitAlive(t, m)
		res := call(t, limited, "code_execute", map[string]any{"language": "python", "code": "print(1)"})
		if want := "Principal limited already has 1 request running or waiting, its most (max_concurrent: 1), so this one did not run: retry once one of them has ended."; !res.IsError || text(res) != want {
			t.Errorf("limited's second concurrent call: isError=%v %q, want %q", res.IsError, text(res), want)
		}
		// The other principal is not held back: its calls run at once,
		// two at a time, while limited's first still runs.
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				res, out := execute(t, full, map[string]any{"language": "python", "code": fmt.Sprintf("print(%d)", i)})
				if res.IsError || out.Stdout != fmt.Sprintf("%d\n", i) {
					t.Errorf("full's call %d while limited's runs: isError=%v %q %q", i, res.IsError, out.Stdout, out.Stderr)
				}
			})
		}
		wg.Wait()
		if !alive(m) {
			t.Error("limited's first run ended before full's calls were done")
		}
		cancel()
		<-first
		waitGone(t, m)
		waitFor(t, eventWait, "limited's next call to run once its first was cancelled", func() bool {
			res := call(t, limited, "code_execute", map[string]any{"language": "python", "code": "print('again')"})
			return !res.IsError && strings.Contains(text(res), "again")
		})
	})

	t.Run("network", func(t *testing.T) {
		if !network {
			t.Skip("without user namespaces process mode has no network namespace for an allowlist")
		}
		code := fmt.Sprintf(`import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://allowed.test:%d/hello", timeout=15).read().decode())
except urllib.error.HTTPError as e:
    print("HTTP", e.code)
`, e.HTTPPort)
		var out struct {
			Stdout  string         `json:"stdout"`
			Stderr  string         `json:"stderr"`
			Network *egress.Report `json:"network"`
		}
		remarshal(t, call(t, limited, "code_execute", map[string]any{"language": "python", "code": code}).StructuredContent, &out)
		if out.Stdout != "HTTP 403\n" || out.Network == nil || len(out.Network.Refused) != 1 || out.Network.Refused[0].Reason != egress.ReasonNotAllowed {
			t.Errorf("limited (network: none) reached the allowed host: %q %q, report %+v", out.Stdout, out.Stderr, out.Network)
		}
		remarshal(t, call(t, full, "code_execute", map[string]any{"language": "python", "code": code}).StructuredContent, &out)
		if out.Stdout != "plain-ok\n" {
			t.Errorf("full did not reach the allowed host: %q %q", out.Stdout, out.Stderr)
		}
	})

	t.Run("sessions", func(t *testing.T) {
		var created struct {
			SessionID string `json:"session_id"`
		}
		remarshal(t, call(t, full, "session_create", map[string]any{"language": "python"}).StructuredContent, &created)
		id := created.SessionID
		if id == "" {
			t.Fatal("full created no session")
		}
		foreign := map[string]string{}
		ask := func(answers map[string]string) {
			answers["execute"] = text(call(t, limited, "code_execute", map[string]any{"language": "python", "code": "print(1)", "session_id": id}))
			answers["close"] = text(call(t, limited, "session_close", map[string]any{"session_id": id}))
			answers["list"] = text(call(t, limited, "session_list", map[string]any{}))
		}
		ask(foreign)
		if res, out := execute(t, full, map[string]any{"language": "python", "code": "x = 6*7\nprint(x)", "session_id": id}); res.IsError || out.Stdout != "42\n" {
			t.Fatalf("full's own session after limited tried to use and close it: isError=%v %q %q", res.IsError, out.Stdout, out.Stderr)
		}
		if res := call(t, full, "session_close", map[string]any{"session_id": id}); res.IsError {
			t.Fatalf("full could not close its session: %q", text(res))
		}
		unknown := map[string]string{}
		ask(unknown)
		for k, v := range foreign {
			if v != unknown[k] {
				t.Errorf("%s of another principal's session answered\n%q\nbut of a session that does not exist\n%q", k, v, unknown[k])
			}
		}
		if !strings.Contains(foreign["execute"], "Unknown session") {
			t.Errorf("limited's call in full's session: %q", foreign["execute"])
		}
	})

	t.Run("artifacts", func(t *testing.T) {
		make40k := map[string]any{"language": "python", "code": "import os\nopen('blob.bin', 'wb').write(os.urandom(40000))"}
		res, _ := execute(t, full, make40k)
		uri := ""
		for _, c := range res.Content {
			if l, ok := c.(*mcp.ResourceLink); ok {
				uri = l.URI
			}
		}
		if uri == "" {
			t.Fatalf("full's run brought no resource link back: %q", text(res))
		}
		ctx, cancel := context.WithTimeout(context.Background(), eventWait)
		defer cancel()
		if _, err := full.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err != nil {
			t.Fatalf("full cannot read its own artifact: %v", err)
		}
		_, foreign := limited.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		// The next run's artifact pushes this one out of the store.
		execute(t, full, make40k)
		if _, err := full.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Fatal("the artifact is still kept after another run's filled the store")
		}
		_, unknown := limited.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if foreign == nil || unknown == nil || foreign.Error() != unknown.Error() {
			t.Errorf("resources/read of another principal's artifact answered\n%v\nbut of one that does not exist\n%v", foreign, unknown)
		}
	})

	t.Run("tasks", func(t *testing.T) {
		// 2026-07-28: the principal owns its tasks.
		fullTasks := &taskClient{t: t, url: s.baseURL + "/mcp", version: "2026-07-28", token: fullToken}
		limitedTasks := &taskClient{t: t, url: s.baseURL + "/mcp", version: "2026-07-28", token: limitedToken}
		id := fullTasks.start(`{"language":"python","code":"print('task done')"}`)
		other := newSecret(t) // an id of the same form that no task has
		for _, method := range []string{"tasks/get", "tasks/cancel"} {
			_, foreign, _ := limitedTasks.post(method, fmt.Sprintf(`{"taskId":%q}`, id))
			_, unknown, _ := limitedTasks.post(method, fmt.Sprintf(`{"taskId":%q}`, other))
			f, _ := json.Marshal(foreign)
			u, _ := json.Marshal(unknown)
			if foreign == nil || !bytes.Equal(bytes.ReplaceAll(f, []byte(id), []byte("ID")), bytes.ReplaceAll(u, []byte(other), []byte("ID"))) {
				t.Errorf("%s of another principal's task answered %s, of a task that does not exist %s", method, f, u)
			}
		}
		task := fullTasks.poll(id, 100*time.Millisecond, eventWait)
		if res, out := fullTasks.result(id, task); task["status"] != "completed" || out.Stdout != "task done\n" {
			t.Errorf("full's task after limited tried to cancel it: %v %v", task["status"], res)
		}
		// 2025-11-25: tasks belong to the MCP session, which no other
		// principal can use.
		fullLegacy := newLegacyTaskClientAs(t, s, fullToken)
		limitedLegacy := newLegacyTaskClientAs(t, s, limitedToken)
		legacy := fullLegacy.start(`{"language":"python","code":"print('legacy done')"}`)
		_, foreign, _ := limitedLegacy.post("tasks/get", fmt.Sprintf(`{"taskId":%q}`, legacy))
		_, unknown, _ := limitedLegacy.post("tasks/get", fmt.Sprintf(`{"taskId":%q}`, "no-such-task"))
		if fmt.Sprint(foreign) != fmt.Sprint(unknown) || foreign == nil {
			t.Errorf("tasks/get of another principal's 2025-11-25 task answered %v, of one that does not exist %v", foreign, unknown)
		}
		fullLegacy.poll(legacy, 100*time.Millisecond, eventWait)
	})

	t.Run("mcp sessions", func(t *testing.T) {
		own := newLegacyTaskClientAs(t, s, fullToken)
		stolen := &taskClient{t: t, url: own.url, version: own.version, session: own.session, token: limitedToken}
		bogus := &taskClient{t: t, url: own.url, version: own.version, session: "mcp-session-" + strings.Repeat("0", 32) + "-" + strings.Repeat("0", 32), token: limitedToken}
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			if a, b := rawStatus(t, stolen, method), rawStatus(t, bogus, method); a != b || !strings.HasPrefix(a, "404") {
				t.Errorf("%s with another principal's MCP session answered %q, with one that does not exist %q", method, a, b)
			}
		}
		if _, rerr, _ := own.post("tools/list", `{}`); rerr != nil {
			t.Errorf("the MCP session does not work any more after another principal tried to end it: %v", rerr)
		}
	})

	t.Run("run token", func(t *testing.T) {
		printToken := map[string]any{"language": "python", "code": "import os\nprint(os.environ['CODEEXEC_RUN_TOKEN'])"}
		_, out := execute(t, full, printToken)
		token := strings.TrimSpace(out.Stdout)
		verify := func(tok string) (string, int) {
			cmd := exec.Command(binPath, "token", "verify", tok)
			cmd.Env = []string{"CODE_EXEC_RUN_TOKEN_KEY=" + key}
			b, _ := cmd.CombinedOutput()
			return string(b), cmd.ProcessState.ExitCode()
		}
		if msg, rc := verify(token); rc != 0 || !strings.HasPrefix(msg, "valid: principal full, org globex, run ") {
			t.Errorf("codeexec token verify of full's run token: %d %q", rc, msg)
		}
		parts := strings.Split(token, ".")
		if len(parts) != 3 {
			t.Fatalf("the run token %q is not a JWT", token)
		}
		payload := []byte(parts[1])
		payload[len(payload)/2] ^= 1 // another character of the claims
		if msg, rc := verify(parts[0] + "." + string(payload) + "." + parts[2]); rc != 1 || !strings.Contains(msg, "not valid") {
			t.Errorf("a tampered token: %d %q", rc, msg)
		}
		// A run's token expires with its run's timeout at the latest.
		short := map[string]any{"language": "python", "code": printToken["code"], "timeout_seconds": 8}
		_, out = execute(t, limited, short)
		expiring := strings.TrimSpace(out.Stdout)
		if msg, rc := verify(expiring); rc == 0 && !strings.Contains(msg, "principal limited, org acme") {
			t.Errorf("limited's run token: %q", msg)
		}
		waitFor(t, eventWait, "the token of a run with an 8 s timeout to expire", func() bool {
			msg, rc := verify(expiring)
			return rc == 1 && strings.Contains(msg, "the token has expired")
		})
		if strings.Contains(out.Stdout+out.Stderr, key) {
			t.Error("the key reached the run")
		}
	})

	t.Run("audit", func(t *testing.T) {
		f, err := os.Open(auditLog)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		seen := map[string]string{}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var entry struct {
				Event     string `json:"event"`
				Requester *struct {
					Principal string `json:"principal"`
					Org       string `json:"org"`
				} `json:"requester"`
			}
			if err := json.Unmarshal(sc.Bytes(), &entry); err != nil {
				t.Fatal(err)
			}
			if entry.Event == "request" && entry.Requester != nil {
				seen[entry.Requester.Principal] = entry.Requester.Org
			}
		}
		if seen["limited"] != "acme" || seen["full"] != "globex" {
			t.Errorf("the audit log's requests name %v, want limited of acme and full of globex", seen)
		}
	})

	t.Run("reload", func(t *testing.T) {
		principalsFile(t, file, limitedToken, fullToken, "    languages: [python, javascript]\n    max_concurrent: 1\n")
		if !s.waitLog("principals reloaded", eventWait) {
			t.Fatal("the changed file was not reloaded")
		}
		if res := call(t, limited, "code_execute", map[string]any{"language": "javascript", "code": "console.log('now allowed')"}); res.IsError || !strings.Contains(text(res), "now allowed") {
			t.Fatalf("after the reload limited's javascript: %q", text(res))
		}
		// A bad file, and SIGHUP: refused, the previous principals stay.
		principalsFile(t, file, limitedToken, fullToken, "    max_concurrent: 99\n")
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !s.waitLog("NOT reloaded", eventWait) || !s.waitLog(`field max_concurrent: 99 is above the server's cap`, eventWait) {
			t.Fatal("the bad file was not refused with its reason")
		}
		if res := call(t, limited, "code_execute", map[string]any{"language": "javascript", "code": "console.log('still allowed')"}); res.IsError {
			t.Errorf("after a refused reload limited's javascript: %q", text(res))
		}
		select {
		case <-s.done:
			t.Fatal("SIGHUP stopped the server")
		default:
		}
	})
}

// rawStatus sends a request of method (a tools/list POST, a GET of the
// stream, or a DELETE) with c's session and token, and returns the status
// line and the body.
func rawStatus(t *testing.T, c *taskClient, method string) string {
	t.Helper()
	req := c.request("tools/list", `{}`)
	req.Method = method
	if method != http.MethodPost {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.Status + " " + b.String()
}

// newSecret is 128 random bits in hex.
func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
