package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestNoProcessOutlivesRun: background processes, daemons and timed-out
// trees of a run are gone once its result is back.
func TestNoProcessOutlivesRun(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, nil), connectOpts{})

	m := marker()
	res, out := execute(t, cs, map[string]any{"language": "bash", "code": fmt.Sprintf(`nohup sleep %[1]s >/dev/null 2>&1 &
setsid sleep %[1]s >/dev/null 2>&1 < /dev/null &
( ( sleep %[1]s >/dev/null 2>&1 & ) & )
echo spawned`, m)})
	if res.IsError || out.Stdout != "spawned\n" {
		t.Fatalf("isError=%v stdout=%q stderr=%q", res.IsError, out.Stdout, out.Stderr)
	}
	waitGone(t, m)

	m = marker()
	res, out = execute(t, cs, map[string]any{"language": "bash", "code": fmt.Sprintf("sleep %[1]s & (sleep %[1]s &); sleep %[1]s", m), "timeout_seconds": 1})
	if !res.IsError || !out.TimedOut {
		t.Fatalf("timeout: isError=%v timed_out=%v", res.IsError, out.TimedOut)
	}
	waitGone(t, m)

	m = marker()
	res, out = execute(t, cs, map[string]any{"language": "python", "code": fmt.Sprintf(`import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", %q])
    os._exit(0)
print("parent done")`, m)})
	if res.IsError || out.Stdout != "parent done\n" {
		t.Fatalf("daemon: isError=%v stdout=%q stderr=%q", res.IsError, out.Stdout, out.Stderr)
	}
	waitGone(t, m)
}

// TestFreshRunDirectory: nothing a run writes is visible to the next one,
// and the server's work directory holds no run directory once they are
// over.
func TestFreshRunDirectory(t *testing.T) {
	t.Parallel()
	env := serverEnv(t, nil)
	cs, _ := connect(t, stdio, env, connectOpts{})
	res, out := execute(t, cs, map[string]any{"language": "bash", "code": "echo left > leftover.txt && pwd"})
	if res.IsError || out.ExitCode != 0 {
		t.Fatalf("writing a file in the run directory: exit=%d stderr=%q", out.ExitCode, out.Stderr)
	}
	first := strings.TrimSpace(out.Stdout)
	res, out = execute(t, cs, map[string]any{"language": "bash", "code": "cat leftover.txt 2>/dev/null || echo absent; cat " + first + "/leftover.txt 2>/dev/null || echo gone"})
	if res.IsError || out.Stdout != "absent\ngone\n" {
		t.Errorf("a file of the previous run is visible: %q", out.Stdout)
	}
	// A run's directory goes right after its answer, in the background.
	var left []string
	waitFor(t, eventWait, "the run directories to go after the runs", func() bool {
		left, _ = globRunDirs(env["CODE_EXEC_WORK_DIR"])
		return len(left) == 0
	}, func() string { return fmt.Sprintf("left behind: %q", left) })
}

// TestDefaultTimeout: CODE_EXEC_TIMEOUT applies to a request without
// timeout_seconds. A run stopped before node printed its first line proves
// nothing about the output it keeps (under the flake hunt's load node took
// over a second to print it), so such a run is tried again on a server
// with a longer default.
func TestDefaultTimeout(t *testing.T) {
	t.Parallel()
	var (
		cs  *mcp.ClientSession
		res *mcp.CallToolResult
		out execResult
	)
	sandboxtest.UntilStartedWithin(t, []time.Duration{10 * time.Second, time.Minute}, func(d time.Duration) string {
		cs, _ = connect(t, http_, serverEnv(t, map[string]string{"CODE_EXEC_TIMEOUT": d.String()}), connectOpts{})
		res, out = execute(t, cs, map[string]any{"language": "javascript", "code": "console.log('started'); setInterval(() => {}, 1000)"})
		return out.Stdout
	})
	if !res.IsError || !out.TimedOut || out.Stdout != "started\n" {
		t.Errorf("isError=%v timed_out=%v stdout=%q, want a timed-out run that kept its output", res.IsError, out.TimedOut, out.Stdout)
	}
	checkExample(t, cs, "process")
}

// TestMemoryLimit: a program that asks for far more than CODE_EXEC_MEMORY
// does not get it, and the server carries on.
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_MEMORY": "64m"}), connectOpts{})
	res, out := execute(t, cs, map[string]any{"language": "python", "code": "b = bytearray(1 << 30)\nb[-1] = 1\nprint('allocated', len(b))"})
	if strings.Contains(out.Stdout, "allocated") || out.ExitCode == 0 {
		t.Errorf("a 1 GiB allocation succeeded under a 64m limit: exit=%d stdout=%q", out.ExitCode, out.Stdout)
	}
	if !out.OOMKilled && !strings.Contains(out.Stderr, "MemoryError") {
		t.Errorf("neither oom_killed nor a MemoryError: isError=%v exit=%d stderr=%q", res.IsError, out.ExitCode, abbrev(out.Stderr))
	}
	if out.OOMKilled != res.IsError && out.OOMKilled {
		t.Errorf("oom_killed without isError")
	}
	checkExample(t, cs, "process")
}

// TestUnicodeOutput: text round-trips through JSON-RPC unchanged, and
// invalid UTF-8 from a program becomes U+FFFD.
func TestUnicodeOutput(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{stdio, http_} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			cs, _ := connect(t, transport, serverEnv(t, nil), connectOpts{})
			res, out := execute(t, cs, map[string]any{"language": "python", "code": "import sys\nprint(sys.stdin.read().upper())\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\xff\\xfe end\\n')", "stdin": "héllo ✓ 世界 \U0001F600"})
			if want := "HÉLLO ✓ 世界 \U0001F600\n\uFFFD end\n"; res.IsError || out.Stdout != want {
				t.Errorf("stdout = %q, want %q", out.Stdout, want)
			}
		})
	}
}

// TestHTTPBodyLimit: an HTTP request far over the code, stdin and files
// limits is refused before it is read, and the server keeps serving.
func TestHTTPBodyLimit(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, http_, serverEnv(t, map[string]string{"CODE_EXEC_MAX_CODE": "1k", "CODE_EXEC_MAX_STDIN": "1k", "CODE_EXEC_MAX_FILES_BYTES": "1k"}))
	c := &rawMCP{t: t, url: s.baseURL + "/mcp"}
	c.initialize()
	big := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"#%s"}}}`, strings.Repeat("x", 4<<20))
	req, _ := http.NewRequest(http.MethodPost, c.url, bytes.NewReader([]byte(big)))
	c.headers(req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a 4 MiB request: %s %q, want 413", resp.Status, abbrev(string(body)))
	}
	checkExample(t, dial(t, s, connectOpts{}), "process")
}

// TestTimeoutWithinCap: a timeout_seconds at the cap, or a fraction of a
// second, is accepted (the cap rejects only what is above it).
func TestTimeoutWithinCap(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_MAX_TIMEOUT": "30s"}), connectOpts{})
	for _, secs := range []float64{30, 12.25} {
		res, out := execute(t, cs, map[string]any{"language": "bash", "code": "echo in-time", "timeout_seconds": secs})
		if res.IsError || out.Stdout != "in-time\n" {
			t.Errorf("timeout_seconds %v: isError=%v stdout=%q text=%q", secs, res.IsError, out.Stdout, text(res))
		}
	}
	// Half a second is accepted: the program runs (execute fails the test
	// on a rejected argument), and on a busy machine may time out.
	res, out := execute(t, cs, map[string]any{"language": "bash", "code": "echo in-time", "timeout_seconds": 0.5})
	if out.Stdout != "in-time\n" && !out.TimedOut {
		t.Errorf("timeout_seconds 0.5: isError=%v timed_out=%v stdout=%q text=%q", res.IsError, out.TimedOut, out.Stdout, text(res))
	}
	// A fraction of a second is kept, and the output before the timeout
	// too; a run stopped before bash printed proves nothing about that
	// output, so it is tried again with a longer timeout (under the cap).
	var secs float64
	sandboxtest.UntilStartedWithin(t, []time.Duration{2500 * time.Millisecond, 7500 * time.Millisecond, 29500 * time.Millisecond}, func(d time.Duration) string {
		secs = d.Seconds()
		res, out = execute(t, cs, map[string]any{"language": "bash", "code": "echo started; sleep 60", "timeout_seconds": secs})
		return out.Stdout
	})
	if !res.IsError || !out.TimedOut || out.Stdout != "started\n" {
		t.Errorf("timeout_seconds %v on a 60 s sleep: isError=%v timed_out=%v stdout=%q", secs, res.IsError, out.TimedOut, out.Stdout)
	}
}

// TestRunHelper: installed as the README says, the server finds process
// mode's run helper beside it, says so, and starts every run's supervisor
// (and so its exec stage) from the helper's file, not from its own.
func TestRunHelper(t *testing.T) {
	t.Parallel()
	cs, s := connect(t, http_, serverEnv(t, nil), connectOpts{})
	helper := filepath.Join(filepath.Dir(binPath), "codeexec-sandbox")
	if !s.waitLog("run helper", eventWait) {
		t.Fatalf("the server did not say which run helper it uses; stderr:\n%s", s.logTail())
	}
	if got := logField(s.stderr.String(), "run helper", "path"); got != helper {
		t.Fatalf("run helper path=%q, want %s; stderr:\n%s", got, helper, s.logTail())
	}
	m := marker()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "bash", "code": "sleep " + m}})
	}()
	defer func() { cancel(); <-done }()
	var supervisor int
	waitFor(t, eventWait, "the run's sleep below the server", func() bool {
		supervisor = supervisorOf(s.cmd.Process.Pid, m)
		return supervisor != 0
	})
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", supervisor))
	switch {
	case errors.Is(err, fs.ErrPermission):
		t.Logf("the supervisor's binary cannot be read here (%v): only the server's word is checked", err)
	case err != nil:
		t.Errorf("reading the supervisor's binary: %v", err)
	case exe != helper:
		t.Errorf("the run's supervisor runs %s, want the run helper %s", exe, helper)
	}
}

// supervisorOf is the process right below the server pid (a run's
// supervisor) above a live process with marker in its command line; 0
// while there is none.
func supervisorOf(pid int, marker string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if !strings.Contains(string(cmd), marker) {
			continue
		}
		for child := p; child > 1; {
			ppid, state, _, ok := procStat(child)
			if !ok || state == "Z" {
				break
			}
			if ppid == pid {
				return child
			}
			child = ppid
		}
	}
	return 0
}
