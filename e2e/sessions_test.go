package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"

	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
)

// Sessions (session_create, code_execute with session_id, session_close,
// session_list), in docker and process mode, through the go-sdk client; in
// kubernetes mode too, by TestKubernetesSessions (kube_test.go).

// sessionEnv is the environment of a server of mode with sessions; in
// docker mode it also returns the engine's client (the test skips without
// an engine, or fails with CODE_EXEC_REQUIRE_DOCKER=1; kubernetes mode's
// skips without a cluster, or fails with CODE_EXEC_REQUIRE_K8S=1).
func sessionEnv(t *testing.T, mode string, extra map[string]string) (map[string]string, *client.Client) {
	t.Helper()
	env := map[string]string{"CODE_EXEC_SANDBOX": mode, "CODE_EXEC_LOG_LEVEL": "info"}
	var cli *client.Client
	// No warm pool: these tests are about session containers and pods only.
	switch mode {
	case "docker":
		cli = dockerEngine(t)
		env["CODE_EXEC_DOCKER_POOL_SIZE"] = "0"
	case "kubernetes":
		env["CODE_EXEC_K8S_POOL_SIZE"] = "0"
	}
	for k, v := range extra {
		env[k] = v
	}
	if mode == "kubernetes" {
		return kubeEnv(t, env), nil
	}
	return serverEnv(t, env), cli
}

// sessionsOwner is what names the sessions' sandboxes of server s: its
// instance (docker mode), its replica (kubernetes mode).
func sessionsOwner(s *server, mode string) string {
	switch mode {
	case "docker":
		return logField(s.stderr.String(), "docker sandbox ready", "instance")
	case "kubernetes":
		return logField(s.stderr.String(), "kubernetes sandbox ready", "replica")
	}
	return ""
}

// createSession calls session_create and returns the session id.
func createSession(t *testing.T, cs *mcp.ClientSession, args map[string]any) string {
	t.Helper()
	res := call(t, cs, "session_create", args)
	if res.IsError {
		t.Fatalf("session_create(%v): %s", args, text(res))
	}
	var out struct {
		SessionID string `json:"session_id"`
	}
	remarshal(t, res.StructuredContent, &out)
	// A replica's ids start with its id and a dot (CODE_EXEC_REPLICA_ID).
	if id := out.SessionID[strings.Index(out.SessionID, ".")+1:]; !strings.HasPrefix(id, "ses_") || len(id) != 36 {
		t.Fatalf("session_create returned session_id %q, want ses_ and 128 random bits in hex (after the replica's id and a dot, if any)", out.SessionID)
	}
	return out.SessionID
}

// sessionExec is code_execute in a session, decoded, with state_lost.
type sessionExec struct {
	execResult
	SessionID string `json:"session_id"`
	StateLost bool   `json:"state_lost"`
}

func inSession(t *testing.T, cs *mcp.ClientSession, id, lang, code string, more ...any) (*mcp.CallToolResult, sessionExec) {
	t.Helper()
	args := map[string]any{"language": lang, "code": code, "session_id": id}
	for i := 0; i+1 < len(more); i += 2 {
		args[more[i].(string)] = more[i+1]
	}
	res := call(t, cs, "code_execute", args)
	var out sessionExec
	if res.StructuredContent != nil {
		remarshal(t, res.StructuredContent, &out)
	}
	return res, out
}

func wantStdout(t *testing.T, res *mcp.CallToolResult, out sessionExec, stdout string) {
	t.Helper()
	if res.IsError || out.ExitCode != 0 || out.Stdout != stdout {
		t.Fatalf("isError=%v exit=%d stdout=%q stderr=%q; want stdout %q (text %q)", res.IsError, out.ExitCode, out.Stdout, out.Stderr, stdout, text(res))
	}
}

func wantToolError(t *testing.T, res *mcp.CallToolResult, words ...string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got %q", text(res))
	}
	for _, w := range words {
		if !strings.Contains(text(res), w) {
			t.Errorf("the error %q does not say %q", text(res), w)
		}
	}
}

// sessionsGone waits until the server of instance (docker) has no session
// container left, the replica instance (kubernetes) no session pod, or
// (process) the session directories are gone from dir.
func sessionsGone(t *testing.T, mode string, cli *client.Client, instance, dir string) {
	t.Helper()
	if mode == "kubernetes" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sel := "codeexec.io/replica=" + instance + ",codeexec.io/role=session"
		if err := kubetest.Connect(t, runsNamespace).WaitPods(ctx, sel, func(pods map[string]*corev1.Pod) bool { return len(pods) == 0 }); err != nil {
			t.Fatalf("session pods left: %v", err)
		}
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		if mode == "docker" {
			for _, c := range containersOf(t, cli, instance) {
				if c.Labels["io.codeexec.role"] == "session" {
					left = append(left, c.ID[:12]+" "+string(c.State))
				}
			}
		} else {
			left, _ = filepath.Glob(filepath.Join(dir, "codeexec-*", "session-*"))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions left 30 s later: %q", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sessionModes(t *testing.T, f func(t *testing.T, mode string)) {
	for _, mode := range []string{"process", "docker"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f(t, mode)
		})
	}
}

// TestSessions: state and files persist, a timeout loses the state but not
// the session, another client cannot use it, session_close removes it, and
// the limit gives a clear error.
func TestSessions(t *testing.T) {
	t.Parallel()
	sessionModes(t, checkSessions)
}

// checkSessions is TestSessions in mode.
func checkSessions(t *testing.T, mode string) {
	env, cli := sessionEnv(t, mode, map[string]string{"CODE_EXEC_MAX_SESSIONS": "2"})
	s := startHTTP(t, http_, env)
	instance := sessionsOwner(s, mode)
	// A session belongs to the client's MCP session (protocol versions
	// before 2026-07-28 have one; later requests are identified by
	// their credentials only, see docs/tools.md).
	alice := dial(t, s, connectOpts{clientName: "alice", protocolVersion: "2025-11-25"})
	bob := dial(t, s, connectOpts{clientName: "bob", protocolVersion: "2025-11-25"})

	py := createSession(t, alice, map[string]any{"language": "python"})
	_, out := inSession(t, alice, py, "python", "x = 41")
	if out.SessionID != py || out.Sandbox != mode {
		t.Fatalf("structuredContent names session %q in %q, want %q in %q", out.SessionID, out.Sandbox, py, mode)
	}
	res, out := inSession(t, alice, py, "python", "print(x + 1)")
	wantStdout(t, res, out, "42\n")

	res, out = inSession(t, alice, py, "python", "open('data.txt', 'w').write('written earlier')")
	wantStdout(t, res, out, "")
	res, out = inSession(t, alice, py, "python", "print(open('data.txt').read())")
	wantStdout(t, res, out, "written earlier\n")

	// A timeout stops the interpreter: the result says the state is
	// lost; the files stay and the next call works.
	res, out = inSession(t, alice, py, "python", "while True: pass", "timeout_seconds", 1)
	if !res.IsError || !out.TimedOut || !out.StateLost || !strings.Contains(text(res), "variables of earlier calls are lost") {
		t.Fatalf("timeout in a session: isError=%v timed_out=%v state_lost=%v text=%q", res.IsError, out.TimedOut, out.StateLost, text(res))
	}
	res, out = inSession(t, alice, py, "python", "print(open('data.txt').read())\nprint('x' in globals())")
	wantStdout(t, res, out, "written earlier\nFalse\n")

	// Another client cannot use, list or close the session.
	res, _ = inSession(t, bob, py, "python", "print(x)")
	wantToolError(t, res, "nknown session", "session_create")
	wantToolError(t, call(t, bob, "session_close", map[string]any{"session_id": py}), "nknown session")
	var list struct {
		Sessions []struct {
			SessionID   string  `json:"session_id"`
			AgeSeconds  float64 `json:"age_seconds"`
			IdleSeconds float64 `json:"idle_seconds"`
		} `json:"sessions"`
	}
	remarshal(t, call(t, bob, "session_list", map[string]any{}).StructuredContent, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("bob lists alice's sessions: %+v", list.Sessions)
	}

	// The limit: two sessions at once.
	sh := createSession(t, alice, map[string]any{"language": "bash"})
	wantToolError(t, call(t, bob, "session_create", map[string]any{}), "Too many sessions", "at most 2", "CODE_EXEC_MAX_SESSIONS", "session_close")
	res, out = inSession(t, alice, sh, "bash", "echo kept > notes; cd /; v=1")
	wantStdout(t, res, out, "")
	res, out = inSession(t, alice, sh, "bash", "cat notes; echo \"v=$v\"")
	wantStdout(t, res, out, "kept\nv=\n")
	res, _ = inSession(t, alice, sh, "python", "print(1)")
	wantToolError(t, res, "runs bash, not python")

	remarshal(t, call(t, alice, "session_list", map[string]any{}).StructuredContent, &list)
	if len(list.Sessions) != 2 || list.Sessions[0].SessionID != py || list.Sessions[0].AgeSeconds <= 0 {
		t.Fatalf("alice's session_list: %+v, want her two sessions, oldest first, with their age", list.Sessions)
	}
	var info struct {
		Sessions struct {
			MaxSessions int `json:"max_sessions"`
			Open        int `json:"open"`
		} `json:"sessions"`
	}
	remarshal(t, call(t, alice, "sandbox_info", map[string]any{}).StructuredContent, &info)
	if info.Sessions.MaxSessions != 2 || info.Sessions.Open != 2 {
		t.Errorf("sandbox_info's sessions: %+v, want at most 2 and alice's 2 open", info.Sessions)
	}

	// Nothing a call starts outlives it: the process it left is gone
	// by the time its result comes. (Popen returns once the child has
	// exec'd sleep, so the marked process did exist.)
	m := marker()
	res, out = inSession(t, alice, py, "python", "import subprocess; p = subprocess.Popen(['sleep', '"+m+"'], start_new_session=True)")
	wantStdout(t, res, out, "")
	if alive(m) {
		t.Errorf("a process that a call started outlived the call")
	}
	// session_close removes the session: its interpreter, processes,
	// files and container.
	for _, id := range []string{py, sh} {
		if res := call(t, alice, "session_close", map[string]any{"session_id": id}); res.IsError {
			t.Fatalf("session_close: %s", text(res))
		}
	}
	sessionsGone(t, mode, cli, instance, env["CODE_EXEC_WORK_DIR"])
	res, _ = inSession(t, alice, py, "python", "print(1)")
	wantToolError(t, res, "nknown session")
	// With the two closed there is room again.
	createSession(t, bob, map[string]any{"language": "javascript"})
}

// TestSessionIdleExpiry: a session no call uses ends by itself, with its
// processes and container.
func TestSessionIdleExpiry(t *testing.T) {
	t.Parallel()
	sessionModes(t, checkSessionIdleExpiry)
}

// checkSessionIdleExpiry is TestSessionIdleExpiry in mode.
func checkSessionIdleExpiry(t *testing.T, mode string) {
	env, cli := sessionEnv(t, mode, map[string]string{"CODE_EXEC_SESSION_IDLE_TIMEOUT": "2s"})
	s := startHTTP(t, http_, env)
	instance := sessionsOwner(s, mode)
	cs := dial(t, s, connectOpts{})
	id := createSession(t, cs, map[string]any{"language": "javascript"})
	m := marker()
	res, out := inSession(t, cs, id, "javascript", "globalThis.child = require('child_process').spawn('sleep', ['"+m+"'])")
	wantStdout(t, res, out, "")
	if alive(m) {
		t.Errorf("a process that a call started outlived the call")
	}
	if !s.waitLog("it was idle for 2s", time.Minute) {
		t.Fatalf("the server did not log the idle session's end")
	}
	sessionsGone(t, mode, cli, instance, env["CODE_EXEC_WORK_DIR"])
	res, _ = inSession(t, cs, id, "javascript", "console.log(1)")
	wantToolError(t, res, "nknown session")
}

// TestSessionsAfterACrash: the sessions of a server killed with SIGKILL are
// gone once the next server has started: their processes die with the
// server, their directories and containers are removed at the next start.
func TestSessionsAfterACrash(t *testing.T) {
	t.Parallel()
	sessionModes(t, func(t *testing.T, mode string) {
		env, cli := sessionEnv(t, mode, nil)
		dir := env["CODE_EXEC_WORK_DIR"]
		s := startHTTP(t, http_, env)
		instance := logField(s.stderr.String(), "docker sandbox ready", "instance")
		cs := dial(t, s, connectOpts{})
		id := createSession(t, cs, map[string]any{"language": "python"})
		m := marker()
		// A call in flight, with a process of its own, when the server dies.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
				"language": "python", "session_id": id,
				"code": "import subprocess; p = subprocess.Popen(['sleep', '" + m + "']); p.wait()"}})
		}()
		waitAlive(t, m)

		if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s.waitExit(t, 30*time.Second)

		s2 := startHTTP(t, http_, env)
		waitGone(t, m)
		sessionsGone(t, mode, cli, instance, dir)
		if mode == "docker" {
			if left := containersOf(t, cli, instance); len(left) > 0 {
				t.Errorf("the next server left containers of the killed one: %s", describeContainers(left))
			}
		}
		cs2 := dial(t, s2, connectOpts{})
		res, _ := inSession(t, cs2, id, "python", "print(1)")
		wantToolError(t, res, "nknown session")
		if err := s2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := s2.waitExit(t, time.Minute); code != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0", code)
		}
		if mode == "process" {
			assertDirEmpty(t, dir)
		}
	})
}

// TestSessionsOff: CODE_EXEC_MAX_SESSIONS=0 offers no session tool and no
// session_id.
func TestSessionsOff(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_MAX_SESSIONS": "0"}), connectOpts{})
	tools := listTools(t, cs)
	for _, tool := range tools.Tools {
		if strings.HasPrefix(tool.Name, "session_") {
			t.Errorf("tool %s offered with sessions off", tool.Name)
		}
		if tool.Name == "code_execute" {
			b, _ := json.Marshal(tool.InputSchema)
			if strings.Contains(string(b), "session_id") {
				t.Errorf("code_execute declares session_id with sessions off: %s", b)
			}
		}
	}
	res := call(t, cs, "code_execute", map[string]any{"language": "python", "code": "print(1)", "session_id": "ses_x"})
	wantToolError(t, res, "unknown argument")
}

// TestSessionAudit: every call in a session is recorded with the session's
// id, like any run (and asked about, with approvals on: see approvals'
// TestGateRunsASessionCallOnItsRunner).
func TestSessionAudit(t *testing.T) {
	t.Parallel()
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_AUDIT_LOG": audit}), connectOpts{})
	id := createSession(t, cs, map[string]any{})
	res, out := inSession(t, cs, id, "python", "print('audited')")
	wantStdout(t, res, out, "audited\n")
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e struct {
			Event   string `json:"event"`
			Session string `json:"session"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if e.Session == id {
			named = append(named, e.Event)
		}
	}
	if strings.Join(named, ",") != "request,run" {
		t.Fatalf("audit entries naming the session: %q, want the request and the run", named)
	}
}

// TestSessionsRestrictedPython: with restricted Python, which checks each
// python program on its own, python sessions are refused; others work.
func TestSessionsRestrictedPython(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_PYTHON_POLICY": "restricted"}), connectOpts{})
	wantToolError(t, call(t, cs, "session_create", map[string]any{"language": "python"}), "CODE_EXEC_PYTHON_POLICY=restricted", "without a session_id")
	id := createSession(t, cs, map[string]any{"language": "javascript"})
	res, out := inSession(t, cs, id, "javascript", "console.log(6 * 7)")
	wantStdout(t, res, out, "42\n")
}
