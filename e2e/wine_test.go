package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// wineRoot is the folder that .ci/ensure-wine.sh prints (a Wine prefix in
// prefix/, node.exe for Windows in node/), or skips the test: with
// CODE_EXEC_REQUIRE_WINE=1 it fails instead.
func wineRoot(t *testing.T) string {
	t.Helper()
	root := os.Getenv("CODE_EXEC_TEST_WINE")
	if root == "" {
		msg := "no Wine prefix: CODE_EXEC_TEST_WINE=$(bash .ci/ensure-wine.sh | tail -n 1) makes one"
		if os.Getenv("CODE_EXEC_REQUIRE_WINE") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if testing.Short() {
		t.Skip("-short: the Windows build under Wine takes a minute")
	}
	return root
}

// TestWindowsStdioUnderWine builds codeexec for Windows and drives it over
// stdio, under Wine, with the official MCP Go SDK client, in process mode
// with node.exe for Windows: the tools are listed, sandbox_info says what
// process mode does and does not isolate on Windows, the documented example
// runs (in javascript: no Windows python here), nothing of the server's
// environment reaches a program, a process that a program detaches dies
// with its run (the run's Job Object), and sessions and files are refused
// with a reason; then the example and the detached process in mode none.
func TestWindowsStdioUnderWine(t *testing.T) {
	root := wineRoot(t)
	modRoot, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "codeexec.exe")
	// -tags wine: Go's file deletion falls back to what Wine 8 implements
	// (sandbox/internal/executor/wine_windows.go).
	build := exec.Command("go", "build", "-tags", "wine", "-ldflags=-checklinkname=0 -X main.version="+testVersion, "-o", exe, "./cmd/codeexec")
	build.Dir = modRoot
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building codeexec.exe: %v\n%s", err, out)
	}
	cs := connectUnderWine(t, root, exe, "process")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // bounds a hang only
	defer cancel()

	tools, err := cs.ListTools(ctx, &mcp.ListToolsParams{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "code_execute") {
		t.Fatalf("tools/list: %v", names)
	}

	// What process mode says of itself on Windows.
	res := call(t, cs, "sandbox_info", map[string]any{})
	var info struct {
		Mode        string `json:"mode"`
		Protections []struct {
			Name   string `json:"name"`
			Active bool   `json:"active"`
			Detail string `json:"detail"`
		} `json:"protections"`
		Languages []struct {
			Name      string `json:"name"`
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
		} `json:"languages"`
	}
	remarshal(t, res.StructuredContent, &info)
	if info.Mode != "process" {
		t.Fatalf("mode %q", info.Mode)
	}
	want := map[string]struct {
		active bool
		detail string
	}{
		"process group kill":   {true, "Job Object"},
		"orphan reaping":       {true, "no breakaway"},
		"desktop restrictions": {true, "clipboard"},
		"network isolation":    {false, "isolates neither files nor the network"},
		"filesystem isolation": {false, "isolates neither files nor the network"},
		"unprivileged user":    {false, "Windows user"},
	}
	for _, p := range info.Protections {
		if w, ok := want[p.Name]; ok {
			if p.Active != w.active || !strings.Contains(p.Detail, w.detail) {
				t.Errorf("sandbox_info: %s active=%v %q, want active=%v and %q", p.Name, p.Active, p.Detail, w.active, w.detail)
			}
			delete(want, p.Name)
		}
	}
	for name := range want {
		t.Errorf("sandbox_info lists no %q", name)
	}
	for _, l := range info.Languages {
		if l.Name == "javascript" && !l.Available {
			t.Fatalf("javascript is unavailable: %s", l.Reason)
		}
	}

	// The documented example, in javascript.
	r, out := execute(t, cs, map[string]any{"language": "javascript", "code": "console.log(String(2n ** 64n))"})
	if r.IsError || out.ExitCode != 0 || strings.TrimRight(out.Stdout, "\r\n") != "18446744073709551616" || out.Sandbox != "process" {
		t.Fatalf("example: isError=%v exit=%d stdout=%q stderr=%q sandbox=%q", r.IsError, out.ExitCode, out.Stdout, out.Stderr, out.Sandbox)
	}

	// Nothing of the server's environment.
	r, out = execute(t, cs, map[string]any{"language": "javascript", "code": "console.log(JSON.stringify(process.env))"})
	if r.IsError || out.ExitCode != 0 {
		t.Fatalf("env: isError=%v exit=%d stderr=%q", r.IsError, out.ExitCode, out.Stderr)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(out.Stdout), &env); err != nil {
		t.Fatalf("env: %v in %q", err, out.Stdout)
	}
	// (Wine adds WINE* variables of its own to every process it starts.)
	for k, v := range env {
		if strings.Contains(k, secretName) || strings.Contains(v, secretValue) || strings.HasPrefix(k, "CODE_EXEC_") || k == "WINEPATH" {
			t.Errorf("a program sees the server's %s=%s", k, v)
		}
	}

	// Sessions are refused, saying why.
	r = call(t, cs, "session_create", map[string]any{"language": "javascript"})
	if !r.IsError || !strings.Contains(text(r), "need a Unix system") {
		t.Errorf("session_create: isError=%v %q, want a refusal that says sessions need a Unix system", r.IsError, text(r))
	}

	// Files in are refused, saying why.
	r = call(t, cs, "code_execute", map[string]any{"language": "javascript", "code": "1", "files": []any{map[string]any{"path": "a.txt", "content": "x"}}})
	if !r.IsError || !strings.Contains(text(r), "need a Unix system") {
		t.Errorf("files: isError=%v %q, want a refusal that says files need a Unix system", r.IsError, text(r))
	}

	// A detached child, left running, dies with its run.
	checkDetachedChildDies(t, cs)

	// Mode none runs programs in a Job Object too: the example runs, and
	// what a run leaves dies with it.
	t.Run("none", func(t *testing.T) {
		cs := connectUnderWine(t, root, exe, "none")
		r, out := execute(t, cs, map[string]any{"language": "javascript", "code": "console.log(String(2n ** 64n))"})
		if r.IsError || strings.TrimRight(out.Stdout, "\r\n") != "18446744073709551616" || out.Sandbox != "none" {
			t.Fatalf("example: isError=%v exit=%d stdout=%q stderr=%q sandbox=%q", r.IsError, out.ExitCode, out.Stdout, out.Stderr, out.Sandbox)
		}
		checkDetachedChildDies(t, cs)
	})
}

// connectUnderWine starts codeexec.exe (exe) under Wine in the prefix of
// root, in mode, with node.exe on its PATH and the test's secret in its
// environment, and connects to it over stdio. It is closed when t ends;
// its stderr is logged when t failed.
func connectUnderWine(t *testing.T, root, exe, mode string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command("wine", exe)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"WINEPREFIX=" + filepath.Join(root, "prefix"),
		"WINEDEBUG=-all",
		// Appended to the Windows PATH: where codeexec finds node.exe.
		"WINEPATH=Z:" + strings.ReplaceAll(filepath.Join(root, "node"), "/", `\`),
		"CODE_EXEC_SANDBOX=" + mode,
		secretName + "=" + secretValue,
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // bounds a hang only
	defer cancel()
	cs, err := newClient().Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connecting to codeexec.exe under Wine: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		_ = cs.Close()
		if t.Failed() {
			t.Logf("codeexec.exe's stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// checkDetachedChildDies runs a program that leaves a detached node
// running, then checks from a second run that it is gone.
func checkDetachedChildDies(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	r, out := execute(t, cs, map[string]any{"language": "javascript", "code": `const c = require("child_process").spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], {detached: true, stdio: "ignore"}); c.unref(); console.log(c.pid)`})
	pid := strings.TrimSpace(out.Stdout)
	if r.IsError || out.ExitCode != 0 || pid == "" {
		t.Fatalf("detach: isError=%v exit=%d stdout=%q stderr=%q", r.IsError, out.ExitCode, out.Stdout, out.Stderr)
	}
	r, out = execute(t, cs, map[string]any{"language": "javascript", "code": `try { process.kill(` + pid + `, 0); console.log("alive") } catch (e) { console.log(e.code) }`})
	if r.IsError || strings.TrimSpace(out.Stdout) != "ESRCH" {
		t.Fatalf("the detached child %s after its run: stdout=%q stderr=%q", pid, out.Stdout, out.Stderr)
	}
}
