package sessions

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// startDriver runs lang's driver directly on this host, with its control
// channel on fds 3 and 4, and returns its Conn. Both end at cleanup.
func startDriver(t *testing.T, lang string) *Conn {
	t.Helper()
	bin := map[string]string{"python": "python3", "javascript": "node"}[lang]
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("%s is not installed: %v", bin, err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args, _ := DriverArgs(lang, "fd:3", "fd:4")
	if lang == "python" {
		args = append([]string{"-I", "-B"}, args...)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = t.TempDir()
	var diag bytes.Buffer
	cmd.Stdout, cmd.Stderr = &diag, &diag
	cmd.ExtraFiles = []*os.File{inR, outW}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	c := NewConn(inW, outR)
	t.Cleanup(func() {
		_ = c.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("driver's own output: %s", diag.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ready, err := c.WaitReady(ctx)
	if err != nil {
		t.Fatalf("the %s driver never got ready: %v", lang, err)
	}
	if !strings.HasPrefix(ready, lang+" ") {
		t.Fatalf("ready frame = %q, want it to name %s", ready, lang)
	}
	return c
}

var testLimits = sandbox.Limits{Timeout: 10 * time.Second, OutputBytes: 1 << 20}

type step struct {
	code, stdin    string
	exit           int
	stdout, stderr string // stdout exact; stderr a substring
}

func runSteps(t *testing.T, c *Conn, steps []step) {
	t.Helper()
	for i, s := range steps {
		res, outcome := c.Exec(context.Background(), s.code, s.stdin, testLimits)
		if outcome != Completed {
			t.Fatalf("call %d (%q): outcome %v, want Completed; stderr %q", i+1, s.code, outcome, res.Stderr)
		}
		if res.ExitCode != s.exit || res.Stdout != s.stdout || !strings.Contains(res.Stderr, s.stderr) {
			t.Fatalf("call %d (%q): exit %d stdout %q stderr %q; want exit %d stdout %q stderr containing %q",
				i+1, s.code, res.ExitCode, res.Stdout, res.Stderr, s.exit, s.stdout, s.stderr)
		}
	}
}

func TestPythonDriver(t *testing.T) {
	t.Parallel()
	c := startDriver(t, "python")
	runSteps(t, c, []step{
		{code: "x = 41", stdout: ""},
		{code: "print(x + 1)", stdout: "42\n"},
		{code: "def f(n):\n    return n * 2\n", stdout: ""},
		{code: "print(f(x))", stdout: "82\n"},
		{code: "1/0", exit: 1, stderr: "ZeroDivisionError"},
		{code: "y = 1\nraise ValueError('boom')", exit: 1, stderr: "<cell 6>\", line 2"},
		{code: "print(x, y)", stdout: "41 1\n"},
		{code: "import sys; print(sys.stdin.read().upper())", stdin: "abc", stdout: "ABC\n"},
		{code: "import sys; print(repr(sys.stdin.read()))", stdout: "''\n"},
		{code: "import subprocess; subprocess.run(['echo', 'from a child'])", stdout: "from a child\n"},
		{code: "import os; os.write(2, b'raw fd 2\\n')", stderr: "raw fd 2"},
		{code: "import sys; sys.exit(3)", exit: 3},
		{code: "print(x)", stdout: "41\n"},
		{code: "print(__name__)", stdout: "__main__\n"},
		{code: "print(len([k for k in globals() if 'codeexec' in k]))", stdout: "0\n"},
	})
}

func TestJavascriptDriver(t *testing.T) {
	t.Parallel()
	c := startDriver(t, "javascript")
	runSteps(t, c, []step{
		{code: "const x = 41", stdout: ""},
		{code: "console.log(x + 1)", stdout: "42\n"},
		{code: "const x = 1; console.log(x)", stdout: "1\n"},
		{code: "function twice(n) { return 2 * n }", stdout: ""},
		{code: "console.log(twice(x))", stdout: "2\n"},
		{code: "const v = await Promise.resolve(5)\nconsole.log(v)", stdout: "5\n"},
		{code: "console.log(v + 1)", stdout: "6\n"},
		{code: "null.boom", exit: 1, stderr: "TypeError"},
		{code: "console.error('to stderr')", stderr: "to stderr"},
		{code: "console.log(require('fs').readFileSync(0, 'utf8').toUpperCase())", stdin: "abc", stdout: "ABC\n"},
		{code: "process.exit(4)", exit: 4},
		{code: "await new Promise(r => setTimeout(r, 10)); console.log('later')", stdout: "later\n"},
		{code: "await Promise.reject(new Error('nope'))", exit: 1, stderr: "nope"},
		{code: "console.log(typeof require, x)", stdout: "function 1\n"},
	})
}

func TestDriverLargeOutput(t *testing.T) {
	t.Parallel()
	for lang, code := range map[string]string{
		"python":     "print('x' * 200000)",
		"javascript": "console.log('x'.repeat(200000))",
	} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			c := startDriver(t, lang)
			res, outcome := c.Exec(context.Background(), code, "", testLimits)
			if outcome != Completed || res.Stdout != strings.Repeat("x", 200000)+"\n" {
				t.Fatalf("outcome %v, %d bytes of stdout; want Completed and 200001 bytes", outcome, len(res.Stdout))
			}
		})
	}
}

func TestDriverLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lang, code string
		lim        sandbox.Limits
		want       Outcome
	}{
		{"python", "while True: pass", sandbox.Limits{Timeout: 200 * time.Millisecond, OutputBytes: 1 << 20}, TimedOut},
		{"python", "while True: print('y' * 1000)", sandbox.Limits{Timeout: 10 * time.Second, OutputBytes: 10000}, Overflowed},
		{"python", "import os; os._exit(9)", testLimits, Died},
		{"javascript", "for (;;) {}", sandbox.Limits{Timeout: 200 * time.Millisecond, OutputBytes: 1 << 20}, TimedOut},
		{"javascript", "for (;;) console.log('y'.repeat(1000))", sandbox.Limits{Timeout: 10 * time.Second, OutputBytes: 10000}, Overflowed},
		{"javascript", "process.reallyExit(9)", testLimits, Died},
	} {
		t.Run(tc.lang+"/"+tc.code, func(t *testing.T) {
			t.Parallel()
			c := startDriver(t, tc.lang)
			res, outcome := c.Exec(context.Background(), tc.code, "", tc.lim)
			if outcome != tc.want {
				t.Fatalf("outcome %v, want %v (stderr %q)", outcome, tc.want, res.Stderr)
			}
			if tc.want == TimedOut && !res.TimedOut {
				t.Errorf("TimedOut not set")
			}
			if tc.want == Overflowed && (!res.Truncated || len(res.Stdout) != 10000) {
				t.Errorf("Truncated %v with %d bytes of stdout, want true and 10000", res.Truncated, len(res.Stdout))
			}
		})
	}
}

func TestDriverCancel(t *testing.T) {
	t.Parallel()
	c := startDriver(t, "python")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, outcome := c.Exec(ctx, "import time; time.sleep(30)", "", testLimits); outcome != Cancelled {
		t.Fatalf("outcome %v, want Cancelled", outcome)
	}
}

// frameBytes encodes one frame.
func frameBytes(kind byte, p string) []byte {
	b := []byte{kind, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(p)))
	return append(b, p...)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// A driver is untrusted: a frame that breaks the protocol ends the Conn,
// never the server.
func TestConnRejectsBadFrames(t *testing.T) {
	t.Parallel()
	for name, stream := range map[string][]byte{
		"oversized frame": append(frameBytes('R', "python 3"), 'O', 0xff, 0xff, 0xff, 0xff),
		"unknown kind":    append(frameBytes('R', "python 3"), frameBytes('Z', "")...),
		"bad exit":        append(frameBytes('R', "python 3"), frameBytes('X', "-7")...),
		"second ready":    append(frameBytes('R', "python 3"), frameBytes('R', "again")...),
		"failure":         append(frameBytes('R', "python 3"), frameBytes('F', "bad call header")...),
		"cut short":       append(frameBytes('R', "python 3"), 'O', 0, 0, 0, 9, 'a'),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := NewConn(nopWriteCloser{io.Discard}, io.NopCloser(bytes.NewReader(stream)))
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the Conn did not end")
			}
			if !errors.Is(c.Err(), ErrDriverDied) {
				t.Fatalf("Err() = %v, want ErrDriverDied", c.Err())
			}
			if _, outcome := c.Exec(context.Background(), "x", "", testLimits); outcome != Died {
				t.Fatalf("Exec on a dead Conn: outcome %v, want Died", outcome)
			}
		})
	}
}
