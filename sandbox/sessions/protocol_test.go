package sessions

import (
	"archive/tar"
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
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// startDriver runs a session supervisor of lang directly on this host
// (no sandbox), with its control channel on fds 3 and 4, in a directory of
// its own, and returns its Conn. Both end at cleanup.
func startDriver(t *testing.T, lang string) *Conn {
	t.Helper()
	c := launchDriver(t, lang, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ready, err := c.WaitReady(ctx)
	if err != nil {
		t.Fatalf("the %s supervisor never got ready: %v (its own output is logged at the end)", lang, err)
	}
	if !strings.HasPrefix(ready, lang) {
		t.Fatalf("ready frame = %q, want it to name %s", ready, lang)
	}
	return c
}

// launchDriver starts a session supervisor of lang as startDriver does,
// with its command changed by edit first (if set), and returns its Conn
// without waiting for it to be ready. What the supervisor wrote itself is
// logged at the end if the test failed.
func launchDriver(t *testing.T, lang string, edit func(*exec.Cmd)) *Conn {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("python3 is not installed: %v", err)
	}
	bin := map[string]string{"python": "python3", "javascript": "node", "bash": "bash"}[lang]
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
	interp := append([]string{path}, sandbox.Languages[lang].Args...)
	cmd := exec.Command(python, SupervisorArgs(lang, "fd:3", "fd:4", interp)...)
	cmd.Dir = t.TempDir()
	var diag bytes.Buffer
	cmd.Stdout, cmd.Stderr = &diag, &diag
	cmd.ExtraFiles = []*os.File{inR, outW}
	if edit != nil {
		edit(cmd)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	c := NewConn(inW, outR)
	t.Cleanup(func() {
		_ = c.Close()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the supervisor's own output: %s", diag.String())
		}
	})
	return c
}

var testLimits = sandbox.Limits{Timeout: 10 * time.Second, OutputBytes: 1 << 20}

type step struct {
	code, stdin    string
	exit           int
	stdout, stderr string // stdout exact; stderr a substring
	lost           bool   // the call ended the interpreter
}

func runSteps(t *testing.T, c *Conn, steps []step) {
	t.Helper()
	for i, s := range steps {
		res, outcome, _ := c.Exec(context.Background(), s.code, s.stdin, testLimits)
		if outcome != Completed {
			t.Fatalf("call %d (%q): outcome %v, want Completed; stderr %q", i+1, s.code, outcome, res.Stderr)
		}
		if res.ExitCode != s.exit || res.Stdout != s.stdout || !strings.Contains(res.Stderr, s.stderr) || res.StateLost != s.lost {
			t.Fatalf("call %d (%q): exit %d stdout %q stderr %q state lost %v; want exit %d stdout %q stderr containing %q state lost %v",
				i+1, s.code, res.ExitCode, res.Stdout, res.Stderr, res.StateLost, s.exit, s.stdout, s.stderr, s.lost)
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
		{code: "import threading, time; threading.Thread(target=time.sleep, args=(60,), name='left').start()", stdout: ""},
		{code: "print([t.name for t in threading.enumerate() if t.name == 'left'])", stdout: "[]\n"},
		{code: "import os; os._exit(9)", exit: 9, lost: true},
		{code: "print('x' in globals())", stdout: "False\n"},
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
		{code: "process.reallyExit(9)", exit: 9, lost: true},
		{code: "console.log(typeof x)", stdout: "undefined\n"},
	})
}

func TestBashCalls(t *testing.T) {
	t.Parallel()
	c := startDriver(t, "bash")
	runSteps(t, c, []step{
		{code: "x=1; echo kept > notes.txt", stdout: ""},
		{code: "cat notes.txt; echo \"x=$x\"", stdout: "kept\nx=\n"},
		{code: "tr a-z A-Z", stdin: "abc", stdout: "ABC"},
		{code: "echo oops >&2; exit 3", exit: 3, stderr: "oops"},
		{code: "kill -9 $$", exit: 137},
		{code: "echo after", stdout: "after\n"},
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
			res, outcome, _ := c.Exec(context.Background(), code, "", testLimits)
			if outcome != Completed || res.Stdout != strings.Repeat("x", 200000)+"\n" {
				t.Fatalf("outcome %v, %d bytes of stdout; want Completed and 200001 bytes", outcome, len(res.Stdout))
			}
		})
	}
}

// A call that times out, goes past the output cap or is cancelled is reset:
// its state is lost, and the next call runs in a fresh interpreter.
func TestDriverLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lang, code string
		lim        sandbox.Limits
		want       Outcome
	}{
		{"python", "while True: pass", sandbox.Limits{Timeout: 200 * time.Millisecond, OutputBytes: 1 << 20}, TimedOut},
		{"python", "while True: print('y' * 1000)", sandbox.Limits{Timeout: 10 * time.Second, OutputBytes: 10000}, Overflowed},
		{"javascript", "for (;;) {}", sandbox.Limits{Timeout: 200 * time.Millisecond, OutputBytes: 1 << 20}, TimedOut},
		{"javascript", "for (;;) console.log('y'.repeat(1000))", sandbox.Limits{Timeout: 10 * time.Second, OutputBytes: 10000}, Overflowed},
		{"bash", "while :; do :; done", sandbox.Limits{Timeout: 200 * time.Millisecond, OutputBytes: 1 << 20}, TimedOut},
	} {
		t.Run(tc.lang+"/"+tc.code, func(t *testing.T) {
			t.Parallel()
			c := startDriver(t, tc.lang)
			res, outcome, _ := c.Exec(context.Background(), tc.code, "", tc.lim)
			if outcome != tc.want {
				t.Fatalf("outcome %v, want %v (stderr %q)", outcome, tc.want, res.Stderr)
			}
			if tc.want == TimedOut && !res.TimedOut {
				t.Errorf("TimedOut not set")
			}
			if tc.want == Overflowed && (!res.Truncated || len(res.Stdout) != 10000) {
				t.Errorf("Truncated %v with %d bytes of stdout, want true and 10000", res.Truncated, len(res.Stdout))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := c.Reset(ctx); err != nil {
				t.Fatalf("reset: %v", err)
			}
			next := map[string]string{"python": "print('fresh')", "javascript": "console.log('fresh')", "bash": "echo fresh"}[tc.lang]
			runSteps(t, c, []step{{code: next, stdout: "fresh\n"}})
		})
	}
}

func TestDriverCancel(t *testing.T) {
	t.Parallel()
	c := startDriver(t, "python")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, outcome, _ := c.Exec(ctx, "import time; time.sleep(30)", "", testLimits); outcome != Cancelled {
		t.Fatalf("outcome %v, want Cancelled", outcome)
	}
}

// Files go into the working directory, never through a link, and the files
// calls change come back once.
func TestFilesAndChanges(t *testing.T) {
	t.Parallel()
	c := startDriver(t, "python")
	ctx := context.Background()
	changed := func() []string {
		t.Helper()
		var names []string
		err := c.Changes(ctx, func(r io.Reader) error {
			tr := tar.NewReader(r)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				names = append(names, h.Name)
			}
		})
		if err != nil {
			t.Fatalf("changes: %v", err)
		}
		return names
	}
	if err := c.WriteFiles(ctx, []artifacts.Input{{Path: "in/data.csv", Data: []byte("a\n")}}); err != nil {
		t.Fatal(err)
	}
	runSteps(t, c, []step{{code: "print(open('in/data.csv').read(), end=''); open('out.txt', 'w').write('x'); import os; os.symlink('/', 'link')", stdout: "a\n"}})
	if got := strings.Join(changed(), " "); got != "in/data.csv link out.txt" {
		t.Fatalf("first changes: %q", got)
	}
	err := c.WriteFiles(ctx, []artifacts.Input{{Path: "ok.txt", Data: []byte("1")}, {Path: "link/etc/planted", Data: []byte("x")}})
	var fe *artifacts.FileError
	if !errors.As(err, &fe) || fe.Index != 1 {
		t.Fatalf("a file below a link: %v, want a FileError for files[1]", err)
	}
	runSteps(t, c, []step{{code: "import os; print(os.path.exists('/etc/planted'), open('ok.txt').read())", stdout: "False 1\n"}})
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
		"unknown kind":    append(frameBytes('R', "python 3"), frameBytes('Q', "")...),
		"unasked answer":  append(frameBytes('R', "python 3"), frameBytes('Z', "")...),
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
			case <-time.After(time.Minute): // bounds a hang only
				t.Fatal("the Conn did not end")
			}
			if !errors.Is(c.Err(), ErrDriverDied) {
				t.Fatalf("Err() = %v, want ErrDriverDied", c.Err())
			}
			if _, outcome, _ := c.Exec(context.Background(), "x", "", testLimits); outcome != Died {
				t.Fatalf("Exec on a dead Conn: outcome %v, want Died", outcome)
			}
		})
	}
}

// TestConnClosedWhileWaiting: a Conn closed while it waits for the
// supervisor's first frame (as the session's start does when its run
// ended) ends with ErrDriverDied alone, not with the closed descriptor's
// "file already closed".
func TestConnClosedWhileWaiting(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := NewConn(nopWriteCloser{io.Discard}, r)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(context.Background()); err != ErrDriverDied {
		t.Fatalf("WaitReady after Close: %v, want exactly %v", err, ErrDriverDied)
	}
}
