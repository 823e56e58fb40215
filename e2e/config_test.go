package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/configs"
)

// runBinary runs codeexec to completion with env and args (stdin empty) and
// returns its exit code, stdout and stderr.
func runBinary(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = envList(env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee) && ctx.Err() == nil:
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("codeexec %q: %v (stderr %q)", args, err, stderr.String())
	return 0, "", ""
}

// TestConfigErrors: a bad setting stops the server at start with exit code
// 2, one line on stderr that names the variable and what it accepts, and
// nothing on stdout.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"sandbox", map[string]string{"CODE_EXEC_SANDBOX": "dockr"}, nil, []string{"CODE_EXEC_SANDBOX", "docker", "process", "none"}},
		{"timeout", map[string]string{"CODE_EXEC_TIMEOUT": "ten"}, nil, []string{"CODE_EXEC_TIMEOUT", "10s"}},
		{"max timeout", map[string]string{"CODE_EXEC_MAX_TIMEOUT": "-5s"}, nil, []string{"CODE_EXEC_MAX_TIMEOUT"}},
		{"timeout above cap", map[string]string{"CODE_EXEC_TIMEOUT": "2m", "CODE_EXEC_MAX_TIMEOUT": "1m"}, nil, []string{"CODE_EXEC_TIMEOUT", "CODE_EXEC_MAX_TIMEOUT"}},
		{"memory", map[string]string{"CODE_EXEC_MEMORY": "lots"}, nil, []string{"CODE_EXEC_MEMORY", "256m"}},
		{"memory too small", map[string]string{"CODE_EXEC_MEMORY": "1m"}, nil, []string{"CODE_EXEC_MEMORY", "32m"}},
		{"max output", map[string]string{"CODE_EXEC_MAX_OUTPUT": "12q"}, nil, []string{"CODE_EXEC_MAX_OUTPUT"}},
		{"concurrency", map[string]string{"CODE_EXEC_MAX_CONCURRENCY": "0"}, nil, []string{"CODE_EXEC_MAX_CONCURRENCY", "1"}},
		{"languages", map[string]string{"CODE_EXEC_LANGUAGES": "python,cobol"}, nil, []string{"CODE_EXEC_LANGUAGES", "cobol"}},
		{"transport", map[string]string{"CODE_EXEC_TRANSPORT": "pigeon"}, nil, []string{"CODE_EXEC_TRANSPORT", "stdio", "sse", "http"}},
		{"log format", map[string]string{"CODE_EXEC_LOG_FORMAT": "xml"}, nil, []string{"CODE_EXEC_LOG_FORMAT", "json"}},
		{"short token", map[string]string{"CODE_EXEC_AUTH_TOKEN": "short"}, []string{"--transport", "http"}, []string{"CODE_EXEC_AUTH_TOKEN", "16"}},
		{"transport flag", nil, []string{"--transport", "pigeon"}, []string{"--transport", "stdio"}},
		{"unknown flag", nil, []string{"--bogus"}, []string{"bogus"}},
		{"stray argument", nil, []string{"serve"}, []string{"serve"}},
		{"http beyond loopback without token", nil, []string{"--transport", "http", "--addr", "0.0.0.0:0"}, []string{"CODE_EXEC_AUTH_TOKEN"}},
		{"sse beyond loopback without token", map[string]string{"CODE_EXEC_TRANSPORT": "sse", "CODE_EXEC_ADDR": ":0"}, nil, []string{"CODE_EXEC_AUTH_TOKEN"}},
		{"bad address", nil, []string{"--transport", "http", "--addr", "nonsense"}, []string{"CODE_EXEC_ADDR"}},
		// A misspelled setting, or a near miss of the prefix, is no default.
		{"misspelled sandbox", map[string]string{configs.Prefix + "SANDBOX_MODE": "docker"}, nil, []string{configs.Prefix + "SANDBOX_MODE is not a codeexec setting", "did you mean CODE_EXEC_SANDBOX?"}},
		{"misspelled timeout", map[string]string{configs.Prefix + "TIMOUT": "30s"}, nil, []string{configs.Prefix + "TIMOUT", "did you mean CODE_EXEC_TIMEOUT?"}},
		{"prefix without underscore", map[string]string{"CODEEXEC_SANDBOX": "docker"}, nil, []string{"CODEEXEC_SANDBOX", "did you mean CODE_EXEC_SANDBOX?"}},
		{"misspelled secret", map[string]string{configs.Prefix + "AUTH_TOKN": secretValue}, []string{"--transport", "http"}, []string{"did you mean CODE_EXEC_AUTH_TOKEN?"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"PATH": os_PATH(), secretName: secretValue}
			for k, v := range c.env {
				env[k] = v
			}
			code, stdout, stderr := runBinary(t, env, c.args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2 (stderr %q)", code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); len(lines) != 1 || !strings.HasSuffix(stderr, "\n") {
				t.Errorf("stderr has %d lines, want exactly one:\n%s", len(lines), stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not mention %q", stderr, w)
				}
			}
			if strings.Contains(stderr, secretValue) {
				t.Errorf("stderr shows the environment's secret")
			}
		})
	}
}

// TestSettingValuesIgnoreCase: an enumerated setting's value is matched in
// any case: the server starts in the mode meant and runs the example.
func TestSettingValuesIgnoreCase(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_SANDBOX": "Process", "CODE_EXEC_NETWORK": "None", "CODE_EXEC_LOG_FORMAT": "JSON"}), connectOpts{})
	checkExample(t, cs, "process")
}

// TestAuditLogErrors: an audit log the server cannot open stops it with a
// last line that names the setting, what is wrong and what to do, and with
// approvals off says nothing of approvals.
func TestAuditLogErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-folder", "audit.jsonl")
	for _, c := range []struct {
		path string
		want string
	}{
		{missing, "codeexec: CODE_EXEC_AUDIT_LOG=" + missing + " cannot be opened: no such file or directory; create its folder (mkdir -p " + filepath.Dir(missing) + ")"},
		{dir, "codeexec: CODE_EXEC_AUDIT_LOG=" + dir + " is a folder: name a file in it, such as " + filepath.Join(dir, "audit.jsonl")},
	} {
		code, stdout, stderr := runBinary(t, serverEnv(t, map[string]string{"CODE_EXEC_AUDIT_LOG": c.path, "CODE_EXEC_LOG_FORMAT": "text"}))
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 1 || stdout != "" || !strings.HasPrefix(lines[len(lines)-1], c.want) {
			t.Errorf("CODE_EXEC_AUDIT_LOG=%s: exit %d, stdout %q, last line of stderr %q; want 1, nothing and %q", c.path, code, stdout, lines[len(lines)-1], c.want)
		}
		if strings.Contains(strings.ToLower(stderr), "approval") {
			t.Errorf("CODE_EXEC_AUDIT_LOG=%s with approvals off: stderr speaks of approvals:\n%s", c.path, stderr)
		}
	}
}

// TestConfigErrorsTogether: several bad settings are all named.
func TestConfigErrorsTogether(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runBinary(t, map[string]string{"PATH": os_PATH(), "CODE_EXEC_SANDBOX": "dockr", "CODE_EXEC_TIMEOUT": "ten"})
	if code != 2 || stdout != "" {
		t.Errorf("exit %d stdout %q, want 2 and nothing", code, stdout)
	}
	for _, w := range []string{"CODE_EXEC_SANDBOX", "CODE_EXEC_TIMEOUT"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q does not name %s", stderr, w)
		}
	}
}

// TestHelp: --help exits 0 and lists every setting, in lines of at most
// 100 columns (a tab counted as 8).
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--help", "-h"} {
		code, stdout, stderr := runBinary(t, map[string]string{"PATH": os_PATH()}, flag)
		if code != 0 {
			t.Errorf("%s: exit code %d, want 0 (stderr %q)", flag, code, stderr)
		}
		names := []string{
			"CODE_EXEC_SANDBOX", "CODE_EXEC_TRANSPORT", "CODE_EXEC_ADDR", "CODE_EXEC_AUTH_TOKEN",
			"CODE_EXEC_TIMEOUT", "CODE_EXEC_MAX_TIMEOUT", "CODE_EXEC_MEMORY", "CODE_EXEC_MAX_OUTPUT",
			"CODE_EXEC_MAX_CODE", "CODE_EXEC_MAX_CONCURRENCY", "CODE_EXEC_LANGUAGES", "CODE_EXEC_WORK_DIR",
			"CODE_EXEC_LOG_LEVEL", "CODE_EXEC_LOG_FORMAT",
		}
		for _, s := range configs.Settings() {
			names = append(names, s.Name)
		}
		for _, n := range names {
			if !strings.Contains(stdout, n) {
				t.Errorf("%s does not list %s", flag, n)
			}
		}
		for i, line := range strings.Split(stdout, "\n") {
			if w := len([]rune(strings.ReplaceAll(line, "\t", "        "))); w > 100 {
				t.Errorf("%s: line %d is %d columns wide, more than 100: %q", flag, i+1, w, line)
			}
		}
		for _, f := range []string{"--transport", "--addr"} {
			if !strings.Contains(stdout, strings.TrimPrefix(f, "-")) {
				t.Errorf("%s does not list the flag %s", flag, f)
			}
		}
	}
	code, stdout, _ := runBinary(t, map[string]string{"PATH": os_PATH()}, "--version")
	if code != 0 || !strings.Contains(stdout, testVersion) {
		t.Errorf("--version: exit %d stdout %q, want 0 and %s", code, stdout, testVersion)
	}
}

const token = "e2e-token-0123456789abcdef0123456789"

// TestAuth: with CODE_EXEC_AUTH_TOKEN set, the HTTP transports refuse
// requests without the right bearer token, and the go-sdk client with it
// works.
func TestAuth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		transport string
		addr      string
	}{
		{http_, "127.0.0.1:0"},
		{sse, "127.0.0.1:0"},
		{http_, "0.0.0.0:0"}, // beyond loopback, allowed with a token
	} {
		t.Run(c.transport+"/"+c.addr, func(t *testing.T) {
			t.Parallel()
			s := startHTTP(t, c.transport, serverEnv(t, map[string]string{"CODE_EXEC_AUTH_TOKEN": token}), "--addr", c.addr)
			// Reach a wildcard listener through loopback.
			if _, port, err := net.SplitHostPort(strings.TrimPrefix(s.baseURL, "http://")); err == nil {
				s.baseURL = "http://127.0.0.1:" + port
			}
			path := "/mcp"
			if c.transport == sse {
				path = "/sse"
			}
			initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
			for _, r := range []struct {
				name, method, path, auth string
			}{
				{"no token", http.MethodPost, "/mcp", ""},
				{"no token GET", http.MethodGet, path, ""},
				{"wrong token", http.MethodPost, "/mcp", "Bearer not-the-token-0123456789"},
				{"token prefix", http.MethodPost, "/mcp", "Bearer " + token[:len(token)-1]},
				{"token with extra", http.MethodPost, "/mcp", "Bearer " + token + "x"},
				{"not bearer", http.MethodPost, "/mcp", "Basic " + token},
				{"bare token", http.MethodPost, "/mcp", token},
				{"message endpoint", http.MethodPost, "/message?sessionId=x", ""},
			} {
				req, _ := http.NewRequest(r.method, s.baseURL+r.path, strings.NewReader(initBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				if r.auth != "" {
					req.Header.Set("Authorization", r.auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", r.name, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("%s %s with %s: %s %q, want 401", r.method, r.path, r.name, resp.Status, abbrev(string(body)))
				}
			}
			if _, err := dialErr(t, s, connectOpts{token: "wrong-token-0123456789abcdef"}); err == nil {
				t.Errorf("the go-sdk client connected with a wrong token")
			}
			checkExample(t, dial(t, s, connectOpts{token: token}), "process")
		})
	}
}

// TestHealthz: /healthz answers ok without authentication (for probes).
func TestHealthz(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, http_, serverEnv(t, map[string]string{"CODE_EXEC_AUTH_TOKEN": token}))
	resp, err := http.Get(s.baseURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Errorf("GET /healthz: %s %q, want 200 ok", resp.Status, body)
	}
}

// TestRunHelpersStartFirst: the binary's internal subcommands that process
// mode starts for every run (the supervisor and the exec stage) run before
// the heavy packages of the server initialize: sandbox/process/early,
// which runs them, initializes before the HTTP stack, the MCP SDK, the
// JSON Schema compiler and the Docker client (see its doc comment for what
// that saves), as Go's initialization order of the real binary shows.
func TestRunHelpersStartFirst(t *testing.T) {
	t.Parallel()
	_, _, stderr := runBinary(t, map[string]string{"PATH": os_PATH(), "GODEBUG": "inittrace=1"}, "--version")
	order := map[string]int{}
	for i, line := range strings.Split(stderr, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "init" {
			if _, seen := order[f[1]]; !seen {
				order[f[1]] = i
			}
		}
	}
	early, ok := order["github.com/codeexec/codeexec/sandbox/process/early"]
	if !ok {
		t.Fatalf("the binary does not initialize sandbox/process/early:\n%s", stderr)
	}
	for _, heavy := range []string{"net/http", "github.com/mark3labs/mcp-go/server", "github.com/santhosh-tekuri/jsonschema/v6", "github.com/moby/moby/client"} {
		if at, ok := order[heavy]; !ok || at < early {
			t.Errorf("%s initializes before the run helpers start (at %d, they at %d)", heavy, at, early)
		}
	}
}
