// Package sandboxtest holds the suite that every sandbox.Runner must pass,
// and a fake Runner for testing the layers above the runners.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/procfs"
)

// SecretName and SecretValue are the sentinel that tests put in the server's
// environment; a mode that scrubs the environment must never let a program
// print the value.
const (
	SecretName  = "CODE_EXEC_TEST_SECRET"
	SecretValue = "s3cr3t-sentinel-value"
)

// Options tell the suite what the runner under test promises.
type Options struct {
	// Mode is the mode the runner must report in each Result.
	Mode sandbox.Mode
	// ScrubsEnv is true when the server's environment must not reach code.
	ScrubsEnv bool
	// Alive reports whether any process whose command line contains marker
	// still exists (on this host, or inside the sandbox's engine). It is
	// called after a run has returned; nil means ProcessesAlive.
	Alive func(t *testing.T, marker string) bool
}

// DefaultLimits are generous limits for suite runs.
func DefaultLimits() sandbox.Limits {
	return sandbox.Limits{
		Timeout:       20 * time.Second,
		MemoryBytes:   512 << 20,
		CPUs:          1,
		Processes:     128,
		OpenFiles:     256,
		FileSizeBytes: 64 << 20,
		OutputBytes:   4 << 20,
	}
}

// HeavyTimeout is the timeout of programs that load large libraries
// (pandas, matplotlib: seconds of CPU at their first import). On a machine
// whose cores are all busy they take many times that, so DefaultLimits' 20
// s is not enough; the bound only keeps a broken run from hanging.
const HeavyTimeout = 3 * time.Minute

// HeavyReq builds a request with DefaultLimits and HeavyTimeout.
func HeavyReq(lang, code string) sandbox.Request {
	req := Req(lang, code)
	req.Limits.Timeout = HeavyTimeout
	return req
}

// Req builds a request with DefaultLimits.
func Req(lang, code string) sandbox.Request {
	return sandbox.Request{Language: lang, Code: code, Limits: DefaultLimits()}
}

// RunSuite runs the shared runner suite against r. The caller owns r and
// closes it after the suite (for example with t.Cleanup).
func RunSuite(t *testing.T, r sandbox.Runner, opts Options) {
	t.Helper()
	if opts.Alive == nil {
		opts.Alive = func(t *testing.T, marker string) bool { return ProcessesAlive(t, marker) }
	}
	// A package whose suites run in parallel (t.Setenv cannot) puts the
	// secret in its whole process's environment first (see TestMain in
	// sandbox/kube).
	if opts.ScrubsEnv && os.Getenv(SecretName) != SecretValue {
		t.Setenv(SecretName, SecretValue)
	}
	rs := &runnerSuite{r: r, opts: opts, caps: r.Capabilities()}
	if rs.caps.Mode != opts.Mode {
		t.Fatalf("Capabilities().Mode = %q, want %q", rs.caps.Mode, opts.Mode)
	}
	for _, c := range runnerCases {
		if c.only == nil || c.only(opts) {
			t.Run(c.name, func(t *testing.T) { c.test(t, rs) })
		}
	}
}

// runnerSuite is the runner under test and what it promises.
type runnerSuite struct {
	r    sandbox.Runner
	opts Options
	caps sandbox.Capabilities
}

// need skips t when lang is unavailable on this host.
func (rs *runnerSuite) need(t *testing.T, lang string) {
	t.Helper()
	st, ok := rs.caps.Language(lang)
	if !ok || !st.Available {
		t.Skipf("language %s unavailable on this host: %s", lang, st.Reason)
	}
}

// run runs req and fails t on an error; a Result of another mode is an
// error of t too.
func (rs *runnerSuite) run(t *testing.T, req sandbox.Request) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := rs.r.Run(ctx, req)
	if err != nil {
		t.Fatalf("Run(%s %q): %v", req.Language, abbrev(req.Code), err)
	}
	if res.Sandbox != rs.opts.Mode {
		t.Errorf("Result.Sandbox = %q, want %q", res.Sandbox, rs.opts.Mode)
	}
	return res
}

// runnerCase is one case of the runner suite: the name of its subtest (go
// test -run selects it), its test, and, when set, whether the runner's
// options call for it at all.
type runnerCase struct {
	name string
	test func(t *testing.T, rs *runnerSuite)
	only func(Options) bool
}

// runnerCases are the runner suite's cases, in the order they run.
var runnerCases = []runnerCase{
	{name: "hello per language", test: runnerHelloPerLanguage},
	{name: "output observed while running", test: runnerOutputObservedWhileRunning},
	{name: "output observed is the result's", test: runnerOutputObservedIsTheResults},
	{name: "exit code and stderr", test: runnerExitCodeAndStderr},
	{name: "uncaught exception is a result", test: runnerUncaughtExceptionIsAResult},
	{name: "stdin", test: runnerStdin},
	{name: "no stdin means end of file", test: runnerNoStdinMeansEndOfFile},
	{name: "large stdin round trip", test: runnerLargeStdinRoundTrip},
	{name: "unicode and invalid utf-8", test: runnerUnicodeAndInvalidUtf8},
	{name: "timeout", test: runnerTimeout},
	{name: "timeout kills the whole tree", test: runnerTimeoutKillsTheWholeTree},
	{name: "no process outlives a run that exits", test: runnerNoProcessOutlivesARunThatExits},
	{name: "python daemon outlives nothing", test: runnerPythonDaemonOutlivesNothing},
	{name: "a leftover holding the output does not hold the run", test: runnerALeftoverHoldingTheOutputDoesNotHoldTheRun},
	{name: "output cap", test: runnerOutputCap},
	{name: "cancellation kills the run", test: runnerCancellationKillsTheRun},
	{name: "fresh working directory", test: runnerFreshWorkingDirectory},
	{name: "files in, artifacts out", test: runnerFilesInArtifactsOut},
	{name: "localhost reaches the program's own loopback server", test: runnerLocalhostReachesTheProgramsOwnLoopbackServer},
	{name: "unknown language", test: runnerUnknownLanguage},
	{name: "server environment does not leak", test: runnerServerEnvironmentDoesNotLeak, only: func(o Options) bool { return o.ScrubsEnv }},
	{name: "request environment reaches the program", test: runnerRequestEnvironment},
	{name: "sequential runs stay correct", test: runnerSequentialRunsStayCorrect},
}

// runnerHelloPerLanguage is the case "hello per language".
func runnerHelloPerLanguage(t *testing.T, rs *runnerSuite) {
	cases := []struct{ lang, code, want string }{
		{"python", "print(2**64)", "18446744073709551616\n"},
		{"javascript", "console.log(2n**64n + '')", "18446744073709551616\n"},
		{"bash", "echo $((6*7))", "42\n"},
	}
	for _, c := range cases {
		t.Run(c.lang, func(t *testing.T) {
			rs.need(t, c.lang)
			res := rs.run(t, Req(c.lang, c.code))
			if res.Stdout != c.want || res.ExitCode != 0 || res.Stderr != "" {
				t.Fatalf("got exit=%d stdout=%q stderr=%q, want exit=0 stdout=%q", res.ExitCode, res.Stdout, res.Stderr, c.want)
			}
			if res.TimedOut || res.OOMKilled || res.Truncated {
				t.Fatalf("limit flags set on a plain run: %+v", res)
			}
		})
	}
}

// runnerOutputObservedWhileRunning is the case "output observed while running".
// Live output: the observer sees both streams while the program still
// runs. The program waits (sleeps for ever) once it has written them;
// the observer cancels the run when it has seen them, so the run ends
// only because its output arrived live, whatever the machine's load.
func runnerOutputObservedWhileRunning(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	var (
		mu   sync.Mutex
		seen [3]strings.Builder
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := Req("bash", "echo one; echo err >&2; sleep 600; echo two")
	req.Limits.Timeout = 2 * time.Minute // a guard against a hang only
	req.Observe = func(s sandbox.Stream, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		seen[s].Write(p)
		if seen[sandbox.Stdout].String() == "one\n" && seen[sandbox.Stderr].String() == "err\n" {
			cancel()
		}
	}
	res, err := rs.r.Run(ctx, req)
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %+v, %v; want it cancelled by the observer: stdout %q and stderr %q observed while the program ran, want one and err",
			res, err, seen[sandbox.Stdout].String(), seen[sandbox.Stderr].String())
	}
}

// runnerOutputObservedIsTheResults is the case "output observed is the result's".
func runnerOutputObservedIsTheResults(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	var (
		mu   sync.Mutex
		seen [3]strings.Builder
	)
	req := Req("bash", "echo one; echo err >&2; echo two")
	req.Observe = func(s sandbox.Stream, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		seen[s].Write(p)
	}
	res := rs.run(t, req)
	mu.Lock()
	defer mu.Unlock()
	if seen[sandbox.Stdout].String() != res.Stdout || seen[sandbox.Stderr].String() != res.Stderr || res.Stdout != "one\ntwo\n" || res.Stderr != "err\n" {
		t.Fatalf("observed stdout %q stderr %q; result stdout %q stderr %q: want the same, one and two, and err",
			seen[sandbox.Stdout].String(), seen[sandbox.Stderr].String(), res.Stdout, res.Stderr)
	}
}

// runnerExitCodeAndStderr is the case "exit code and stderr".
func runnerExitCodeAndStderr(t *testing.T, rs *runnerSuite) {
	cases := []struct{ lang, code string }{
		{"python", "import sys\nsys.stderr.write('oops\\n')\nsys.exit(3)"},
		{"javascript", "process.stderr.write('oops\\n'); process.exit(3)"},
		{"bash", "echo oops >&2; exit 3"},
	}
	for _, c := range cases {
		t.Run(c.lang, func(t *testing.T) {
			rs.need(t, c.lang)
			res := rs.run(t, Req(c.lang, c.code))
			if res.ExitCode != 3 || res.Stderr != "oops\n" || res.Stdout != "" {
				t.Fatalf("got exit=%d stdout=%q stderr=%q, want exit=3 stderr=%q", res.ExitCode, res.Stdout, res.Stderr, "oops\n")
			}
		})
	}
}

// runnerUncaughtExceptionIsAResult is the case "uncaught exception is a result".
func runnerUncaughtExceptionIsAResult(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	res := rs.run(t, Req("python", "raise ValueError('boom')"))
	if res.ExitCode != 1 || !strings.Contains(res.Stderr, "ValueError: boom") {
		t.Fatalf("got exit=%d stderr=%q", res.ExitCode, res.Stderr)
	}
}

// runnerStdin is the case "stdin".
func runnerStdin(t *testing.T, rs *runnerSuite) {
	cases := []struct{ lang, code string }{
		{"python", "import sys\nprint(sys.stdin.read().upper(), end='')"},
		{"javascript", "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>process.stdout.write(s.toUpperCase()))"},
		{"bash", "tr a-z A-Z"},
	}
	for _, c := range cases {
		t.Run(c.lang, func(t *testing.T) {
			rs.need(t, c.lang)
			req := Req(c.lang, c.code)
			req.Stdin = "hello\nworld\n"
			res := rs.run(t, req)
			if res.Stdout != "HELLO\nWORLD\n" || res.ExitCode != 0 {
				t.Fatalf("got exit=%d stdout=%q stderr=%q", res.ExitCode, res.Stdout, res.Stderr)
			}
		})
	}
}

// runnerNoStdinMeansEndOfFile is the case "no stdin means end of file".
func runnerNoStdinMeansEndOfFile(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	res := rs.run(t, Req("python", "import sys\nprint(repr(sys.stdin.read()))"))
	if res.Stdout != "''\n" {
		t.Fatalf("stdout = %q, want %q (stderr %q)", res.Stdout, "''\n", res.Stderr)
	}
}

// runnerLargeStdinRoundTrip is the case "large stdin round trip".
func runnerLargeStdinRoundTrip(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	req := Req("python", "import sys,hashlib\nd=sys.stdin.buffer.read()\nprint(len(d), hashlib.sha256(d).hexdigest()[:16])")
	req.Stdin = strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	res := rs.run(t, req)
	if !strings.HasPrefix(res.Stdout, "1048576 ") {
		t.Fatalf("stdout = %q stderr = %q", res.Stdout, res.Stderr)
	}
}

// runnerUnicodeAndInvalidUtf8 is the case "unicode and invalid utf-8".
func runnerUnicodeAndInvalidUtf8(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	res := rs.run(t, Req("python", "import sys\nprint('héllo ✓ 世界')\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\xff\\xfe end\\n')"))
	// Each run of invalid bytes becomes one U+FFFD.
	want := "héllo ✓ 世界\n\uFFFD end\n"
	if res.Stdout != want {
		t.Fatalf("stdout = %q, want %q", res.Stdout, want)
	}
}

// runnerTimeout is the case "timeout".
func runnerTimeout(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	var res *sandbox.Result
	UntilStarted(t, func(timeout time.Duration) string {
		req := Req("python", "print('started', flush=True)\nwhile True:\n    pass")
		req.Limits.Timeout = timeout
		res = rs.run(t, req)
		return res.Stdout
	})
	if !res.TimedOut {
		t.Fatalf("TimedOut = false: %+v", res)
	}
	if res.ExitCode == 0 {
		t.Fatalf("a timed-out run reported exit code 0")
	}
	if res.Stdout != "started\n" {
		t.Fatalf("output before the timeout was lost: stdout = %q", res.Stdout)
	}
}

// runnerTimeoutKillsTheWholeTree is the case "timeout kills the whole tree".
func runnerTimeoutKillsTheWholeTree(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	marker := Marker()
	var res *sandbox.Result
	UntilStarted(t, func(timeout time.Duration) string {
		req := Req("bash", treeProgram(marker))
		req.Limits.Timeout = timeout
		res = rs.run(t, req)
		return res.Stdout
	})
	if !res.TimedOut || res.Stdout != "started\n" {
		t.Fatalf("want a run that started its tree and timed out: %+v", res)
	}
	if rs.opts.Alive(t, marker) {
		t.Fatalf("a process of the run outlived it (marker %s)", marker)
	}
}

// runnerNoProcessOutlivesARunThatExits is the case "no process outlives a run that exits".
func runnerNoProcessOutlivesARunThatExits(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	marker := Marker()
	code := fmt.Sprintf(`nohup sleep %[1]s >/dev/null 2>&1 &
(sleep %[1]s >/dev/null 2>&1 &)
setsid sleep %[1]s >/dev/null 2>&1 < /dev/null &
( ( sleep %[1]s >/dev/null 2>&1 & ) & )
echo spawned`, marker)
	res := rs.run(t, Req("bash", code))
	if res.Stdout != "spawned\n" {
		t.Fatalf("stdout = %q stderr = %q", res.Stdout, res.Stderr)
	}
	if rs.opts.Alive(t, marker) {
		t.Fatalf("a background process outlived its run (marker %s)", marker)
	}
}

// runnerPythonDaemonOutlivesNothing is the case "python daemon outlives nothing".
func runnerPythonDaemonOutlivesNothing(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	marker := Marker()
	code := fmt.Sprintf(`import os, subprocess
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", %q])
    os._exit(0)
print("parent done")`, marker)
	res := rs.run(t, Req("python", code))
	if res.Stdout != "parent done\n" {
		t.Fatalf("stdout = %q stderr = %q", res.Stdout, res.Stderr)
	}
	if rs.opts.Alive(t, marker) {
		t.Fatalf("a double-forked daemon outlived its run (marker %s)", marker)
	}
}

// runnerALeftoverHoldingTheOutputDoesNotHoldTheRun is the case "a leftover
// holding the output does not hold the run". Processes a run leaves with its
// stdout and stderr (a background job, a daemon that left the group) are
// killed when the program ends, and the run ends then, not once its output
// closes: it does not reach a timeout (4 s) shorter than the time a run's
// output gets to close after its program ended (5 s, executor's stopGrace).
func runnerALeftoverHoldingTheOutputDoesNotHoldTheRun(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	marker := Marker()
	req := Req("bash", fmt.Sprintf("sleep %[1]s &\n(setsid sleep %[1]s &)\necho spawned", marker))
	req.Limits.Timeout = 4 * time.Second
	res := rs.run(t, req)
	if res.TimedOut || res.ExitCode != 0 || res.Stdout != "spawned\n" {
		t.Fatalf("timed out %v, exit %d, stdout %q, stderr %q; want spawned, at once", res.TimedOut, res.ExitCode, res.Stdout, abbrev(res.Stderr))
	}
	if rs.opts.Alive(t, marker) {
		t.Fatalf("a background process outlived its run (marker %s)", marker)
	}
}

// runnerOutputCap is the case "output cap".
func runnerOutputCap(t *testing.T, rs *runnerSuite) {
	cases := []struct{ lang, code string }{
		{"python", "import sys\nwhile True:\n    sys.stdout.write('x' * 4096)"},
		// Synchronous writes: process.stdout.write on a full pipe only
		// queues in memory while a busy loop never yields.
		{"javascript", "const fs=require('fs'); const s='y'.repeat(4096); for(;;){ fs.writeSync(1, s) }"},
		{"bash", "yes flood"},
		{"python", "import sys\nwhile True:\n    sys.stderr.write('e' * 4096)"},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s-%d", c.lang, i), func(t *testing.T) {
			rs.need(t, c.lang)
			req := Req(c.lang, c.code)
			req.Limits.OutputBytes = 64 << 10
			req.Limits.Timeout = 30 * time.Second
			res := rs.run(t, req)
			if !res.Truncated {
				t.Fatalf("Truncated = false after a flood: stdout %d bytes", len(res.Stdout))
			}
			if res.TimedOut {
				t.Fatalf("a flood ran until the timeout instead of being stopped at the cap")
			}
			if n := int64(len(res.Stdout) + len(res.Stderr)); n > req.Limits.OutputBytes || n < req.Limits.OutputBytes/2 {
				t.Fatalf("kept %d bytes of output, want close to the cap %d", n, req.Limits.OutputBytes)
			}
		})
	}
}

// runnerCancellationKillsTheRun is the case "cancellation kills the run".
func runnerCancellationKillsTheRun(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	marker := Marker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancelled once its processes run (it says so), not before.
	started := make(chan struct{})
	var out strings.Builder
	req := Req("bash", treeProgram(marker))
	req.Limits.Timeout = 2 * time.Minute // a guard against a hang only
	req.Observe = func(s sandbox.Stream, p []byte) {
		if s == sandbox.Stdout && !strings.Contains(out.String(), "started\n") {
			if out.Write(p); strings.Contains(out.String(), "started\n") {
				close(started)
			}
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := rs.r.Run(ctx, req)
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the run ended before its processes started: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel returned %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("Run did not return after cancellation")
	}
	if rs.opts.Alive(t, marker) {
		t.Fatalf("a process of the cancelled run is still alive")
	}
}

// runnerFreshWorkingDirectory is the case "fresh working directory".
func runnerFreshWorkingDirectory(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	res := rs.run(t, Req("bash", "ls -A; echo leftover > leftover.txt; ls"))
	if strings.Contains(res.Stdout, "leftover.txt\n") && strings.Index(res.Stdout, "leftover.txt") < strings.LastIndex(res.Stdout, "leftover.txt") {
		t.Fatalf("first run already saw leftover.txt: %q", res.Stdout)
	}
	res = rs.run(t, Req("bash", "cat leftover.txt 2>/dev/null || echo absent"))
	if res.Stdout != "absent\n" {
		t.Fatalf("a file from a previous run is visible: %q", res.Stdout)
	}
}

// runnerFilesInArtifactsOut is the case "files in, artifacts out".
func runnerFilesInArtifactsOut(t *testing.T, rs *runnerSuite) {
	filesSuite(t, rs)
}

// runnerLocalhostReachesTheProgramsOwnLoopbackServer is the case "localhost reaches the program's own loopback server".
// A program that starts a server on its own loopback and talks to it by
// the name localhost, as test suites and local tools do. Every mode has
// a loopback; docker mode's containers resolve the name without the
// engine's /etc/hosts (the sandbox image's nss-myhostname).
func runnerLocalhostReachesTheProgramsOwnLoopbackServer(t *testing.T, rs *runnerSuite) {
	cases := []struct {
		lang, code string
		want       []string // one of these on stdout
	}{
		{"python", LocalhostPython, []string{"pong 127.0.0.1\n", "pong ::1\n"}},
		{"javascript", `const net = require("net");
const srv = net.createServer((c) => c.end("pong"));
srv.listen(0, () => {
  const c = net.connect(srv.address().port, "localhost");
  let got = "";
  c.on("data", (d) => { got += d; });
  c.on("end", () => { console.log(got, true); srv.close(); });
  c.on("error", (e) => { console.log("error", e.code); srv.close(); });
});
`, []string{"pong true\n"}},
	}
	for _, c := range cases {
		t.Run(c.lang, func(t *testing.T) {
			rs.need(t, c.lang)
			res := rs.run(t, Req(c.lang, c.code))
			if !slices.Contains(c.want, res.Stdout) || res.ExitCode != 0 {
				t.Fatalf("got exit=%d stdout=%q stderr=%q, want one of %q", res.ExitCode, res.Stdout, res.Stderr, c.want)
			}
		})
	}
}

// runnerUnknownLanguage is the case "unknown language".
func runnerUnknownLanguage(t *testing.T, rs *runnerSuite) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := rs.r.Run(ctx, Req("cobol", "DISPLAY 'HI'."))
	if !errors.Is(err, sandbox.ErrUnknownLanguage) {
		t.Fatalf("Run(cobol) error = %v, want ErrUnknownLanguage", err)
	}
}

// runnerServerEnvironmentDoesNotLeak is the case "server environment does not leak".
func runnerServerEnvironmentDoesNotLeak(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	code := `env; cat /proc/self/environ; cat /proc/$PPID/environ 2>/dev/null
for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done | grep -a CODE_EXEC || true`
	res := rs.run(t, Req("bash", code))
	if strings.Contains(res.Stdout+res.Stderr, SecretValue) {
		t.Fatalf("the server's secret reached sandboxed code")
	}
	pres := rs.run(t, Req("python", "import os\nprint(sorted(os.environ))"))
	if strings.Contains(pres.Stdout, SecretName) {
		t.Fatalf("python sees %s: %s", SecretName, pres.Stdout)
	}
}

// runnerRequestEnvironment is the case "request environment reaches the
// program": a runner that says it gives programs Request.Env
// (Capabilities.RunEnv) does, in every language, each variable replacing
// one of the same name; one that does not say so is skipped.
func runnerRequestEnvironment(t *testing.T, rs *runnerSuite) {
	if !rs.r.Capabilities().RunEnv {
		t.Skip("the runner does not give programs a request's environment (Capabilities.RunEnv)")
	}
	for lang, code := range map[string]string{
		"python":     "import os\nprint(os.environ['CODEEXEC_TEST_VAR'], os.environ['HOME'] == 'replaced')",
		"javascript": "console.log(process.env.CODEEXEC_TEST_VAR, process.env.HOME === 'replaced')",
		"bash":       `echo "$CODEEXEC_TEST_VAR" $( [ "$HOME" = replaced ] && echo true || echo false )`,
	} {
		if st, ok := rs.r.Capabilities().Language(lang); !ok || !st.Available {
			continue
		}
		req := Req(lang, code)
		req.Env = []string{"CODEEXEC_TEST_VAR=from the request", "HOME=replaced"}
		res := rs.run(t, req)
		want := "from the request True\n"
		if lang != "python" {
			want = "from the request true\n"
		}
		if res.Stdout != want {
			t.Errorf("%s: stdout %q, stderr %q, want %q", lang, res.Stdout, abbrev(res.Stderr), want)
		}
	}
}

// runnerSequentialRunsStayCorrect is the case "sequential runs stay correct".
func runnerSequentialRunsStayCorrect(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	for i := range 10 {
		res := rs.run(t, Req("python", fmt.Sprintf("print(%d*3)", i)))
		if want := strconv.Itoa(i*3) + "\n"; res.Stdout != want {
			t.Fatalf("run %d: stdout = %q, want %q", i, res.Stdout, want)
		}
	}
}

// treeProgram is a bash program that starts two background processes
// (one a double fork) whose command lines hold marker, says "started" once
// both run, and then waits in a third.
func treeProgram(marker string) string {
	return fmt.Sprintf(`sleep %[1]s & a=$!
(sleep %[1]s & echo $! > .b)
for p in $a $(cat .b); do
  until [[ "$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)" == *%[1]s* ]]; do :; done
done
echo started
sleep %[1]s`, marker)
}

// StartTimeouts are the timeouts that UntilStarted tries in turn.
var StartTimeouts = []time.Duration{time.Second, 4 * time.Second, 15 * time.Second, 60 * time.Second}

// UntilStarted calls try with each of StartTimeouts in turn until the
// stdout it returns starts with "started\n", the program's sign that it ran
// before the timeout stopped it. A test of the timeout needs a program that
// started: on a busy machine an interpreter may need more than a second to
// start, and a run stopped before then proves nothing about what the
// timeout kills or keeps. The caller keeps the last result.
func UntilStarted(t *testing.T, try func(timeout time.Duration) (stdout string)) {
	t.Helper()
	UntilStartedWithin(t, StartTimeouts, try)
}

// UntilStartedWithin is UntilStarted with the timeouts to try in turn, for
// a test whose timeouts must be of a kind (a fraction of a second, under
// an operator's cap).
func UntilStartedWithin(t *testing.T, timeouts []time.Duration, try func(timeout time.Duration) (stdout string)) {
	t.Helper()
	for _, d := range timeouts {
		stdout := try(d)
		if strings.HasPrefix(stdout, "started\n") {
			return
		}
		t.Logf("the program had not started when its %s timeout stopped it (stdout %q): again with a longer one", d, stdout)
	}
}

// LocalhostPython starts a server on 127.0.0.1 and reaches it by the name
// localhost; it prints "pong" and the first address the name resolves to.
const LocalhostPython = `import socket, threading
srv = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=lambda: srv.accept()[0].sendall(b"pong")).start()
with socket.create_connection(("localhost", srv.getsockname()[1]), timeout=10) as c:
    print(c.recv(4).decode(), socket.getaddrinfo("localhost", None)[0][4][0])
`

// Marker returns a unique sleep duration (a valid argument to sleep(1)) that
// identifies the processes of one test on this host.
func Marker() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n, _ := strconv.ParseUint(hex.EncodeToString(b), 16, 64)
	return fmt.Sprintf("%d.%06d", 900+n%99, n%1000000)
}

// OnlyChild returns the only child of process pid (of any of its
// threads), read from /proc, and fails t unless there is exactly one.
func OnlyChild(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var children []string
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		children = append(children, strings.Fields(string(b))...)
	}
	if len(children) != 1 {
		t.Fatalf("process %d has the children %v, want one", pid, children)
	}
	child, err := strconv.Atoi(children[0])
	if err != nil {
		t.Fatal(err)
	}
	return child
}

// ProcessesAlive reports whether a process on this host has marker in its
// command line, leaving out those that are dying: it waits up to a minute
// for processes that are being killed (SIGKILL pending, or exiting) to
// disappear, since a killed process leaves only once the scheduler runs
// it, late on a busy machine; and up to two seconds, as it always did,
// for others, killed just after the run returned. It returns false as soon
// as none is left.
func ProcessesAlive(t *testing.T, marker string) bool {
	t.Helper()
	start := time.Now()
	for {
		found, dying := markedProcesses(t, marker)
		switch {
		case found == 0:
			return false
		case found > dying && time.Since(start) > 2*time.Second:
			return true
		case time.Since(start) > time.Minute:
			t.Logf("%d processes with marker %s have been dying for a minute", dying, marker)
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// markedProcesses counts the processes on this host, zombies left out (but
// not a process whose first thread alone has ended), whose command line
// holds marker, and those of them that are dying.
func markedProcesses(t *testing.T, marker string) (found, dying int) {
	t.Helper()
	found, dying, err := scanMarked(marker)
	if err != nil {
		t.Skipf("no /proc on this host: %v", err)
	}
	return found, dying
}

// MarkedAlive reports whether a process on this host, zombies left out
// (but not a process whose first thread alone has ended), has marker in
// its command line now.
func MarkedAlive(marker string) bool {
	found, _, _ := scanMarked(marker)
	return found > 0
}

// PidAlive reports whether process pid is alive: not gone, and not a
// zombie (a process whose first thread alone has ended is alive).
func PidAlive(pid int) bool {
	return procfs.LiveTask(filepath.Join("/proc", strconv.Itoa(pid))) != ""
}

// scanMarked is markedProcesses without a test.
func scanMarked(marker string) (found, dying int, err error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := procfs.LiveTask(filepath.Join("/proc", e.Name()))
		if dir == "" {
			continue // it has already died
		}
		b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !strings.Contains(string(b), marker) {
			continue
		}
		st, _ := os.ReadFile(filepath.Join(dir, "stat"))
		found++
		if isDying(dir, strings.Fields(afterParen(string(st)))) {
			dying++
		}
	}
	return found, dying, nil
}

// isDying reports whether the process of /proc dir, whose stat fields
// after the command name are stat, is exiting (PF_EXITING) or has SIGKILL
// pending.
func isDying(dir string, stat []string) bool {
	const pfExiting = 0x4
	if len(stat) > 6 {
		if flags, err := strconv.ParseUint(stat[6], 10, 64); err == nil && flags&pfExiting != 0 {
			return true
		}
	}
	status, _ := os.ReadFile(filepath.Join(dir, "status"))
	for _, line := range strings.Split(string(status), "\n") {
		name, mask, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && m&(1<<(9-1)) != 0 {
			return true
		}
	}
	return false
}

func afterParen(stat string) string {
	if i := strings.LastIndexByte(stat, ')'); i >= 0 {
		return stat[i+1:]
	}
	return stat
}

func abbrev(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Started sets req.Observe to close the returned channel when the program
// first writes to its standard output: a test that must act while a
// program runs has it print a line first and waits on this, not on a clock
// or a poll.
func Started(req *sandbox.Request) <-chan struct{} {
	c := make(chan struct{})
	var once sync.Once
	req.Observe = func(s sandbox.Stream, _ []byte) {
		if s == sandbox.Stdout {
			once.Do(func() { close(c) })
		}
	}
	return c
}
