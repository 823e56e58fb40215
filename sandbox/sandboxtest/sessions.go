package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// SessionOptions tell the session suite what the backend under test
// promises.
type SessionOptions struct {
	// Mode is the mode the backend must report in each Result.
	Mode sandbox.Mode
	// ScrubsEnv is true when the server's environment must not reach code.
	ScrubsEnv bool
	// Alive reports whether any process whose command line contains marker
	// still exists; nil means ProcessesAlive.
	Alive func(t *testing.T, marker string) bool
	// Gone, if set, reports whether everything a closed session had (its
	// directory, its container) is gone; the suite calls it after Close
	// with the output of pwd in the session.
	Gone func(t *testing.T, dir string) bool
	// DirUncapped, when set, says why the session's working directory has
	// no size cap in this mode (mode none, or no mount namespace);
	// otherwise a call cannot write more than the file-size limit there.
	DirUncapped string
	// Processes, if set, is the sessions' process limit instead of
	// DefaultLimits'. Where the limit counts every process of a host user
	// that the tests share (process mode without a user namespace or users
	// of its own: RLIMIT_NPROC), the sessions and test binaries that run
	// beside a session take from its headroom as they start.
	Processes int
}

// startSession starts a session of lang on b within lim and a deadline an
// hour away; it is closed at cleanup.
func startSession(t *testing.T, b sessions.Backend, lang string, lim sandbox.Limits) sessions.Session {
	t.Helper()
	s, err := b.Start(context.Background(), sessions.Spec{ID: "ses_test", Language: lang, Limits: lim, Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatalf("starting a %s session: %v", lang, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the session: %v", err)
		}
	})
	return s
}

// StartSession starts a session of lang on b with DefaultLimits and a
// deadline an hour away; it is closed at cleanup.
func StartSession(t *testing.T, b sessions.Backend, lang string) sessions.Session {
	t.Helper()
	return startSession(t, b, lang, DefaultLimits())
}

// SessionCall runs code in s with DefaultLimits and fails the test on an error.
func SessionCall(t *testing.T, s sessions.Session, lang, code string) *sandbox.Result {
	t.Helper()
	res, err := s.Exec(context.Background(), Req(lang, code))
	if err != nil {
		t.Fatalf("call %q: %v", code, err)
	}
	return res
}

// CheckSessionChart checks, in a python session of b whose python has
// pandas and matplotlib: a CSV sent with one call is loaded; the chart that
// a later call shows comes back from that call as figure_1.png, an image.
func CheckSessionChart(t *testing.T, b sessions.Backend) {
	t.Helper()
	s := StartSession(t, b, "python")
	req := HeavyReq("python", "import pandas as pd\ndf = pd.read_csv('temps.csv')")
	req.Files = inputs(t, artifacts.File{Path: "temps.csv", Content: "city,temp\nOslo,3\nRome,18\nCairo,30\n"})
	req.Artifacts = &artifacts.Options{}
	if res, err := s.Exec(context.Background(), req); err != nil || res.ExitCode != 0 || len(res.Artifacts.Artifacts) != 0 {
		t.Fatalf("loading: %+v %v", res, err)
	}
	req = HeavyReq("python", "import matplotlib.pyplot as plt\ndf.plot.bar(x='city', y='temp')\nplt.show()")
	req.Artifacts = &artifacts.Options{}
	res, err := s.Exec(context.Background(), req)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("plotting: %+v %v", res, err)
	}
	if got := artifactPaths(res); len(got) != 1 || got[0] != "figure_1.png" || res.Artifacts.Artifacts[0].Kind != artifacts.KindImage {
		t.Fatalf("artifacts %+v (stderr %q), want figure_1.png as an image", res.Artifacts, res.Stderr)
	}
}

// CheckSessionOOM checks, in the python session s, whose memory limit is
// well below 512 MiB: a call that fills 512 MiB is killed by the limit,
// reported as oom_killed with the state lost, and the files of the calls
// before it stay.
func CheckSessionOOM(t *testing.T, s sessions.Session) {
	t.Helper()
	SessionCall(t, s, "python", "x = 1; open('f', 'w').write('kept')")
	res := SessionCall(t, s, "python", "b = bytearray(512 << 20); b[::4096] = b'x' * len(b[::4096])")
	if !res.OOMKilled || !res.StateLost {
		t.Fatalf("oom killed %v, state lost %v (exit %d, stderr %q); want both", res.OOMKilled, res.StateLost, res.ExitCode, res.Stderr)
	}
	if res := SessionCall(t, s, "python", "print(open('f').read())"); res.Stdout != "kept\n" {
		t.Fatalf("after the OOM kill: stdout %q, want the file", res.Stdout)
	}
}

// CheckSessionReaps checks, in python and bash sessions of b, that the
// session's supervisor reaps: the orphans of a call leave no zombie behind,
// and after a fork bomb that filled the processes limit and timed out, the
// next calls have their processes back.
func CheckSessionReaps(t *testing.T, b sessions.Backend) {
	t.Helper()
	lim := DefaultLimits()
	// Few enough pythons to fit the memory limit: under gVisor the OOM
	// killer takes its whole kernel (see docker mode's gvisorGaps).
	lim.Processes = 32
	zombies := "n=0; for f in /proc/[0-9]*/stat; do read -r s < \"$f\" 2>/dev/null && case \"${s##*) }\" in Z*) n=$((n+1));; esac; done; echo \"zombies $n\""
	for lang, bomb := range map[string]string{
		"bash":   "b() { b & b & wait; }; b",
		"python": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
	} {
		t.Run(lang, func(t *testing.T) {
			s, err := b.Start(context.Background(), sessions.Spec{ID: "ses_test", Language: lang, Limits: lim, Deadline: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			run := func(code string) string {
				t.Helper()
				if lang == "python" {
					code = "import subprocess; print(subprocess.run(['sh', '-c', " + fmt.Sprintf("%q", code) + "], capture_output=True, text=True).stdout, end='')"
				}
				return SessionCall(t, s, lang, code).Stdout
			}
			// Forty orphans that end at once: their parents exit first.
			run("for i in $(seq 40); do ( sh -c 'exit 0' & ); done")
			if got := run(zombies); got != "zombies 0\n" {
				t.Fatalf("after orphans ended: %q, want none", got)
			}
			req := Req(lang, bomb)
			req.Limits.Timeout = 2 * time.Second
			res, err := s.Exec(context.Background(), req)
			if err != nil || !res.TimedOut {
				t.Fatalf("the fork bomb: %+v %v", res, err)
			}
			// Ten processes at once: well within the 32 of the limit, which
			// in kubernetes mode (RLIMIT_NPROC of the pod's uid) also counts
			// the supervisor, the call's client, the relay and the threads
			// of the test cluster's pause container (a Go program).
			for range 3 {
				if got := run("for i in $(seq 10); do sleep 0.01 & done; wait; echo done; " + zombies); got != "done\nzombies 0\n" {
					t.Fatalf("after the fork bomb, a call that starts 10 processes: %q", got)
				}
			}
		})
	}
}

// RunSessionSuite runs the shared session suite against b, a backend of a
// mode whose every language is available.
func RunSessionSuite(t *testing.T, b sessions.Backend, opts SessionOptions) {
	ss := &sessionSuite{b: b, opts: opts, alive: opts.Alive}
	if ss.alive == nil {
		ss.alive = ProcessesAlive
	}
	for _, c := range sessionCases {
		if c.only == nil || c.only(opts) {
			t.Run(c.name, func(t *testing.T) { c.test(t, ss) })
		}
	}
}

// sessionSuite is the session backend under test and what it promises.
type sessionSuite struct {
	b     sessions.Backend
	opts  SessionOptions
	alive func(t *testing.T, marker string) bool
}

// limits are the limits of the suite's sessions.
func (ss *sessionSuite) limits() sandbox.Limits {
	lim := DefaultLimits()
	if ss.opts.Processes > 0 {
		lim.Processes = ss.opts.Processes
	}
	return lim
}

// start starts a session of lang within the suite's limits; it is closed
// at cleanup.
func (ss *sessionSuite) start(t *testing.T, lang string) sessions.Session {
	t.Helper()
	return startSession(t, ss.b, lang, ss.limits())
}

// expect fails t unless res exited with exit, wrote stdout and ran in the
// backend's mode.
func (ss *sessionSuite) expect(t *testing.T, res *sandbox.Result, exit int, stdout string) {
	t.Helper()
	if res.ExitCode != exit || res.Stdout != stdout || res.Sandbox != ss.opts.Mode {
		t.Fatalf("exit %d stdout %q sandbox %s (stderr %q); want exit %d stdout %q sandbox %s",
			res.ExitCode, res.Stdout, res.Sandbox, abbrev(res.Stderr), exit, stdout, ss.opts.Mode)
	}
}

// sessionCase is one case of the session suite: the name of its subtest
// (go test -run selects it), its test, and, when set, whether the
// backend's options call for it at all.
type sessionCase struct {
	name string
	test func(t *testing.T, ss *sessionSuite)
	only func(SessionOptions) bool
}

// sessionCases are the session suite's cases, in the order they start.
var sessionCases = []sessionCase{
	{name: "variables persist", test: sessionVariablesPersist},
	{name: "files persist", test: sessionFilesPersist},
	{name: "files in and artifacts out, call by call", test: sessionFilesInAndArtifactsOutCallByCall},
	{name: "names with control characters are listed escaped, once", test: sessionNamesWithControlCharactersAreListedEscapedOnce},
	{name: "files are never written through a link", test: sessionFilesAreNeverWrittenThroughALink},
	{name: "an exception keeps the state", test: sessionAnExceptionKeepsTheState},
	{name: "stdin is the call's", test: sessionStdinIsTheCalls},
	{name: "a timeout loses the state, not the files", test: sessionATimeoutLosesTheStateNotTheFiles},
	{name: "the output cap loses the state", test: sessionTheOutputCapLosesTheState},
	{name: "bash timeout", test: sessionBashTimeout},
	{name: "cancel", test: sessionCancel},
	{name: "environment scrubbed", test: sessionEnvironmentScrubbed, only: func(o SessionOptions) bool { return o.ScrubsEnv }},
	{name: "nothing a call starts outlives it, and close removes everything", test: sessionNothingACallStartsOutlivesItAndCloseRemovesEverything},
	{name: "a process whose first thread has ended does not outlive its call", test: sessionAProcessWhoseFirstThreadHasEndedDoesNotOutliveItsCall},
	{name: "leftovers cannot write into later calls", test: sessionLeftoversCannotWriteIntoLaterCalls},
	{name: "a forged end does not end a call", test: sessionAForgedEndDoesNotEndACall},
	{name: "the working directory is capped", test: sessionTheWorkingDirectoryIsCapped},
}

// sessionVariablesPersist is the case "variables persist".
func sessionVariablesPersist(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	for lang, calls := range map[string][2]string{
		"python":     {"x = 41", "print(x + 1)"},
		"javascript": {"let x = 41", "console.log(x + 1)"},
	} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			s := ss.start(t, lang)
			ss.expect(t, SessionCall(t, s, lang, calls[0]), 0, "")
			ss.expect(t, SessionCall(t, s, lang, calls[1]), 0, "42\n")
		})
	}
}

// sessionFilesPersist is the case "files persist".
func sessionFilesPersist(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	for lang, calls := range map[string][2]string{
		"python":     {"open('notes.txt', 'w').write('kept')", "print(open('notes.txt').read())"},
		"javascript": {"require('fs').writeFileSync('notes.txt', 'kept')", "console.log(require('fs').readFileSync('notes.txt', 'utf8'))"},
		"bash":       {"echo kept > notes.txt; cd /; x=1", "cat notes.txt; echo \"x=$x\""},
	} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			s := ss.start(t, lang)
			SessionCall(t, s, lang, calls[0])
			want := "kept\n"
			if lang == "bash" {
				// A fresh bash per call: files stay, shell state does not.
				want = "kept\nx=\n"
			}
			ss.expect(t, SessionCall(t, s, lang, calls[1]), 0, want)
		})
	}
}

// sessionFilesInAndArtifactsOutCallByCall is the case "files in and artifacts out, call by call".
func sessionFilesInAndArtifactsOutCallByCall(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	for lang, calls := range map[string][4]string{
		"python": {"x = 1",
			"print(open('in/data.csv').read().splitlines()[1]); open('out.txt', 'w').write('made'); open('in/data.csv', 'a').write('3,4\\n')",
			"print(open('out.txt').read())",
			"open('out.txt', 'w').write('made'); open('late.svg', 'w').write('<svg xmlns=\"http://www.w3.org/2000/svg\"/>')"},
		"javascript": {"let x = 1",
			"const fs = require('fs'); console.log(fs.readFileSync('in/data.csv', 'utf8').split('\\n')[1]); fs.writeFileSync('out.txt', 'made'); fs.appendFileSync('in/data.csv', '3,4\\n')",
			"console.log(require('fs').readFileSync('out.txt', 'utf8'))",
			"require('fs').writeFileSync('out.txt', 'made'); require('fs').writeFileSync('late.svg', '<svg xmlns=\"http://www.w3.org/2000/svg\"/>')"},
		"bash": {"x=1",
			"sed -n 2p in/data.csv; printf made > out.txt; echo 3,4 >> in/data.csv",
			"cat out.txt; echo",
			"printf made > out.txt; echo '<svg xmlns=\"http://www.w3.org/2000/svg\"/>' > late.svg"},
	} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			s := ss.start(t, lang)
			call := func(code string, files ...artifacts.File) *sandbox.Result {
				t.Helper()
				req := Req(lang, code)
				req.Files = inputs(t, files...)
				req.Artifacts = &artifacts.Options{}
				res, err := s.Exec(context.Background(), req)
				if err != nil {
					t.Fatalf("call %q: %v", code, err)
				}
				if res.Artifacts == nil {
					t.Fatalf("call %q: no collection", code)
				}
				return res
			}
			// Nothing written: no artifacts.
			if res := call(calls[0]); len(res.Artifacts.Artifacts) != 0 || res.ExitCode != 0 {
				t.Fatalf("first call: exit %d artifacts %v; want 0, none", res.ExitCode, artifactPaths(res))
			}
			// Files in; what the call made or changed comes back, the
			// files it only read do not.
			res := call(calls[1], artifacts.File{Path: "in/data.csv", Content: "a,b\n1,2\n"}, artifacts.File{Path: "unread.txt", Content: "x"})
			ss.expect(t, res, 0, "1,2\n")
			if got := artifactPaths(res); !slices.Equal(got, []string{"in/data.csv", "out.txt"}) && !slices.Equal(got, []string{"out.txt", "in/data.csv"}) {
				t.Fatalf("second call's artifacts %v; want in/data.csv and out.txt", got)
			}
			for _, a := range res.Artifacts.Artifacts {
				if a.Path == "out.txt" && (string(a.Data) != "made" || a.Kind != artifacts.KindText) {
					t.Errorf("out.txt: %q %s", a.Data, a.Kind)
				}
			}
			// A call that only reads returns nothing: the files of
			// earlier calls are not reported again.
			res = call(calls[2])
			ss.expect(t, res, 0, "made\n")
			if got := artifactPaths(res); len(got) != 0 {
				t.Fatalf("a call that wrote nothing returned %v", got)
			}
			// A new image comes back as an image.
			res = call(calls[3])
			if got := artifactPaths(res); !slices.Contains(got, "late.svg") || slices.Contains(got, "in/data.csv") {
				t.Fatalf("fourth call's artifacts %v; want late.svg, and not in/data.csv", got)
			}
			for _, a := range res.Artifacts.Artifacts {
				if a.Path == "late.svg" && a.Kind != artifacts.KindImage {
					t.Errorf("late.svg came back as %s, want an image", a.Kind)
				}
			}
		})
	}
}

// sessionNamesWithControlCharactersAreListedEscapedOnce is the case "names with control characters are listed escaped, once".
func sessionNamesWithControlCharactersAreListedEscapedOnce(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	s := ss.start(t, "python")
	req := Req("python", unsafeNamesProgram)
	req.Artifacts = &artifacts.Options{}
	res, err := s.Exec(context.Background(), req)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("first call: %+v %v", res, err)
	}
	CheckUnsafeNames(t, res.Artifacts)
	req = Req("python", "x = 1")
	req.Artifacts = &artifacts.Options{}
	res, err = s.Exec(context.Background(), req)
	if err != nil || res.ExitCode != 0 || res.Artifacts == nil {
		t.Fatalf("second call: %+v %v", res, err)
	}
	if len(res.Artifacts.Artifacts)+len(res.Artifacts.Omitted) != 0 {
		t.Errorf("a call that wrote nothing lists %v and %v", artifactPaths(res), res.Artifacts.Omitted)
	}
}

// sessionFilesAreNeverWrittenThroughALink is the case "files are never written through a link".
func sessionFilesAreNeverWrittenThroughALink(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	s := ss.start(t, "python")
	SessionCall(t, s, "python", "import os; os.symlink('/tmp', 'link')")
	req := Req("python", "print('ran')")
	req.Files = inputs(t, artifacts.File{Path: "link/planted.txt", Content: "x"})
	if _, err := s.Exec(context.Background(), req); !errors.Is(err, artifacts.ErrInvalidFile) {
		t.Fatalf("a file below a link: err = %v, want artifacts.ErrInvalidFile", err)
	}
	res := SessionCall(t, s, "python", "import os; print(os.path.exists('/tmp/planted.txt'))")
	ss.expect(t, res, 0, "False\n")
	// A folder the code made read-only: the file is refused (or, for a
	// server that may write anyway, written), never a sandbox failure.
	SessionCall(t, s, "python", "import os; os.mkdir('ro'); os.chmod('ro', 0o555)")
	req.Files = inputs(t, artifacts.File{Path: "ro/x.txt", Content: "x"})
	if _, err := s.Exec(context.Background(), req); err != nil && !errors.Is(err, artifacts.ErrInvalidFile) {
		t.Fatalf("a file in a read-only folder: err = %v, want artifacts.ErrInvalidFile or none", err)
	}
	req.Files = inputs(t, artifacts.File{Path: "after.txt", Content: "fine"})
	req.Code = "print(open('after.txt').read())"
	res, err := s.Exec(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ss.expect(t, res, 0, "fine\n")
}

// sessionAnExceptionKeepsTheState is the case "an exception keeps the state".
func sessionAnExceptionKeepsTheState(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	s := ss.start(t, "python")
	SessionCall(t, s, "python", "x = 1")
	res := SessionCall(t, s, "python", "x = 2\nraise ValueError('boom')")
	if res.ExitCode != 1 || !strings.Contains(res.Stderr, "ValueError: boom") || res.StateLost {
		t.Fatalf("exit %d stderr %q state lost %v; want 1, the traceback, false", res.ExitCode, res.Stderr, res.StateLost)
	}
	ss.expect(t, SessionCall(t, s, "python", "print(x)"), 0, "2\n")
}

// sessionStdinIsTheCalls is the case "stdin is the call's".
func sessionStdinIsTheCalls(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	s := ss.start(t, "python")
	req := Req("python", "import sys; print(sys.stdin.read()[::-1])")
	req.Stdin = "abc"
	res, err := s.Exec(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ss.expect(t, res, 0, "cba\n")
	ss.expect(t, SessionCall(t, s, "python", "import sys; print(repr(sys.stdin.read()))"), 0, "''\n")
}

// sessionATimeoutLosesTheStateNotTheFiles is the case "a timeout loses the state, not the files".
func sessionATimeoutLosesTheStateNotTheFiles(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	for lang, calls := range map[string][3]string{
		"python":     {"x = 1; open('f', 'w').write('still here')", "while True: pass", "print(open('f').read()); print(x)"},
		"javascript": {"var x = 1; require('fs').writeFileSync('f', 'still here')", "for (;;) {}", "console.log(require('fs').readFileSync('f', 'utf8')); console.log(x)"},
	} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			s := ss.start(t, lang)
			SessionCall(t, s, lang, calls[0])
			req := Req(lang, calls[1])
			req.Limits.Timeout = 500 * time.Millisecond
			res, err := s.Exec(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !res.TimedOut || !res.StateLost || res.OOMKilled {
				t.Fatalf("timed out %v, state lost %v, oom killed %v; want a timeout that lost the state, not an OOM kill", res.TimedOut, res.StateLost, res.OOMKilled)
			}
			res = SessionCall(t, s, lang, calls[2])
			if !strings.HasPrefix(res.Stdout, "still here\n") || res.ExitCode != 1 || res.StateLost {
				t.Fatalf("after the timeout: exit %d stdout %q stderr %q; want the file, then an error for the lost variable", res.ExitCode, res.Stdout, abbrev(res.Stderr))
			}
			ss.expect(t, SessionCall(t, s, lang, map[string]string{"python": "print('fresh')", "javascript": "console.log('fresh')"}[lang]), 0, "fresh\n")
		})
	}
}

// sessionTheOutputCapLosesTheState is the case "the output cap loses the state".
func sessionTheOutputCapLosesTheState(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	s := ss.start(t, "python")
	req := Req("python", "while True: print('y' * 1000)")
	req.Limits.OutputBytes = 10000
	res, err := s.Exec(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || !res.StateLost || res.OOMKilled {
		t.Fatalf("truncated %v, state lost %v, oom killed %v; want a cut that lost the state, not an OOM kill", res.Truncated, res.StateLost, res.OOMKilled)
	}
	ss.expect(t, SessionCall(t, s, "python", "print('fresh')"), 0, "fresh\n")
}

// sessionBashTimeout is the case "bash timeout".
func sessionBashTimeout(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	s := ss.start(t, "bash")
	req := Req("bash", "sleep 30")
	req.Limits.Timeout = 300 * time.Millisecond
	res, err := s.Exec(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.OOMKilled {
		t.Fatalf("timed out %v, oom killed %v; want a timeout, not an OOM kill", res.TimedOut, res.OOMKilled)
	}
	ss.expect(t, SessionCall(t, s, "bash", "echo next"), 0, "next\n")
}

// sessionCancel is the case "cancel".
func sessionCancel(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	s := ss.start(t, "python")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := s.Exec(ctx, Req("python", "import time; time.sleep(30)"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	ss.expect(t, SessionCall(t, s, "python", "print('fresh')"), 0, "fresh\n")
}

// sessionEnvironmentScrubbed is the case "environment scrubbed".
func sessionEnvironmentScrubbed(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	s := ss.start(t, "python")
	res := SessionCall(t, s, "python", "import os; print(os.environ.get('"+SecretName+"', 'absent'))")
	ss.expect(t, res, 0, "absent\n")
}

// sessionNothingACallStartsOutlivesItAndCloseRemovesEverything is the case "nothing a call starts outlives it, and close removes everything".
func sessionNothingACallStartsOutlivesItAndCloseRemovesEverything(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	for _, lang := range []string{"python", "javascript", "bash"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			s, err := ss.b.Start(context.Background(), sessions.Spec{ID: "ses_test", Language: lang, Limits: ss.limits(), Deadline: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			marker := Marker()
			code := map[string]string{
				"python":     "import subprocess, os; p = subprocess.Popen(['sleep', '" + marker + "'], start_new_session=True); print(os.getcwd())",
				"javascript": "const cp = require('child_process'); globalThis.p = cp.spawn('sleep', ['" + marker + "'], { detached: true, stdio: 'ignore' }); console.log(process.cwd())",
				"bash":       "setsid sleep " + marker + " >/dev/null 2>&1 < /dev/null & disown; pwd",
			}[lang]
			res := SessionCall(t, s, lang, code)
			dir := strings.TrimSpace(res.Stdout)
			if ss.alive(t, marker) {
				t.Errorf("a process that a call started outlived the call (stderr %q)", abbrev(res.Stderr))
			}
			ss.expect(t, SessionCall(t, s, lang, map[string]string{"python": "print('next')", "javascript": "console.log('next')", "bash": "echo next"}[lang]), 0, "next\n")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if ss.opts.Gone != nil && !ss.opts.Gone(t, dir) {
				t.Errorf("the session's files or sandbox outlived it (%s)", dir)
			}
			if err := s.Close(); err != nil {
				t.Errorf("a second Close: %v", err)
			}
			if _, err := s.Exec(context.Background(), Req(lang, "1")); !errors.Is(err, sandbox.ErrClosed) {
				t.Errorf("a call after Close: err = %v, want sandbox.ErrClosed", err)
			}
		})
	}
}

// sessionAProcessWhoseFirstThreadHasEndedDoesNotOutliveItsCall is the case
// "a process whose first thread has ended does not outlive its call". A
// process whose first thread called exit(2), the system call, runs on in
// its other threads while /proc/PID/stat says Z: the call waits until the
// process it started is in that state, so the end of the call meets it so.
func sessionAProcessWhoseFirstThreadHasEndedDoesNotOutliveItsCall(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	s := ss.start(t, "python")
	marker := Marker()
	res := SessionCall(t, s, "python", FirstThreadEnds(marker))
	if !strings.HasPrefix(res.Stdout, "first thread ended") {
		t.Fatalf("the process did not end its first thread: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, abbrev(res.Stderr))
	}
	if ss.alive(t, marker) {
		t.Errorf("a process whose first thread had ended outlived the call")
	}
	ss.expect(t, SessionCall(t, s, "python", "print('next')"), 0, "next\n")
}

// FirstThreadExits is a python program that starts a thread that runs on,
// then ends its first thread with exit(2), the system call.
const FirstThreadExits = `
import ctypes, os, threading, time
def stay():
    while True:
        time.sleep(1)
threading.Thread(target=stay).start()
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[os.uname().machine], 0)
`

// FirstThreadEnds is python code that starts a process with marker in its
// command line, which starts a thread that runs on and ends its own first
// thread with exit(2), the system call; the code returns once /proc says
// the process is a zombie (it is not), and prints "first thread ended".
func FirstThreadEnds(marker string) string {
	return `import subprocess, sys, time
stay = """` + FirstThreadExits + `"""
p = subprocess.Popen([sys.executable, "-c", stay, "` + marker + `"], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while True:
    with open("/proc/%d/stat" % p.pid) as f:
        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
            break
    time.sleep(0.01)
print("first thread ended")
`
}

// sessionLeftoversCannotWriteIntoLaterCalls is the case "leftovers cannot write into later calls".
// What a call leaves running cannot write into a later call's result:
// a background process, a python thread, a javascript interval and
// worker, each writing forged frames (output and an exit status) into
// the interpreter's control channel as fast as it can, from the moment
// the call that started it knows it wrote. The next call's result is
// its own.
func sessionLeftoversCannotWriteIntoLaterCalls(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	for name, c := range map[string]struct{ lang, start, next string }{
		"python/background process":      {"python", pyForge + pyForgeProcess, pyNext},
		"python/thread":                  {"python", pyForge + pyForgeThread, pyNext},
		"javascript/background process":  {"javascript", jsForge + jsForgeProcess, jsNext},
		"javascript/interval and worker": {"javascript", jsForge + jsForgeInterval, jsNext},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := ss.start(t, c.lang)
			if res := SessionCall(t, s, c.lang, c.start); !strings.Contains(res.Stdout, "started") {
				t.Fatalf("the call that starts the leftover ended before its own code did (its leftover forged the end), or the leftover did not start: exit %d stdout %q stderr %q", res.ExitCode, abbrev(res.Stdout), abbrev(res.Stderr))
			}
			ss.expect(t, SessionCall(t, s, c.lang, c.next), 0, "real\n")
			ss.expect(t, SessionCall(t, s, c.lang, c.next), 0, "real\n")
		})
	}
}

// sessionAForgedEndDoesNotEndACall is the case "a forged end does not end a call".
// A call's own code that writes an end frame into its control channel
// and goes on does not end the call: it runs on to its timeout.
func sessionAForgedEndDoesNotEndACall(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	for lang, code := range map[string]string{
		"python":     pyForge + "for fd in control_fds():\n    try:\n        os.write(fd, FORGED)\n    except OSError:\n        pass\ntime.sleep(30)\n",
		"javascript": jsForge + "fs.writeSync(control, FORGED); await new Promise((r) => setTimeout(r, 30000));",
	} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			s := ss.start(t, lang)
			req := Req(lang, code)
			req.Limits.Timeout = 1500 * time.Millisecond
			res, err := s.Exec(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !res.TimedOut || !res.StateLost {
				t.Fatalf("timed out %v, state lost %v (exit %d, stdout %q); want a call that runs on to its timeout", res.TimedOut, res.StateLost, res.ExitCode, abbrev(res.Stdout))
			}
			ss.expect(t, SessionCall(t, s, lang, map[string]string{"python": "print('fresh')", "javascript": "console.log('fresh')"}[lang]), 0, "fresh\n")
		})
	}
}

// sessionTheWorkingDirectoryIsCapped is the case "the working directory is capped".
func sessionTheWorkingDirectoryIsCapped(t *testing.T, ss *sessionSuite) {
	t.Parallel()
	if ss.opts.DirUncapped != "" {
		t.Skip(ss.opts.DirUncapped)
	}
	lim := ss.limits()
	lim.FileSizeBytes = 4 << 20
	s, err := ss.b.Start(context.Background(), sessions.Spec{ID: "ses_test", Language: "python", Limits: lim, Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// Eight files of 1 MiB, each under the file-size limit.
	res := SessionCall(t, s, "python", "n = 0\ntry:\n    for i in range(8):\n        open('f%d' % i, 'wb').write(b'x' * (1 << 20))\n        n += 1\nexcept OSError as e:\n    print(e.strerror)\nprint(n)")
	if res.ExitCode != 0 || strings.HasSuffix(res.Stdout, "\n8\n") || res.Stdout == "8\n" {
		t.Fatalf("exit %d stdout %q: a session wrote 8 MiB into a directory capped at 4 MiB", res.ExitCode, res.Stdout)
	}
}

// pyForge finds the descriptors of the calling python process, beyond its
// stdout and stderr, open for writing on a pipe or a FIFO (the driver's
// control output among them), and makes FORGED: an output frame and an end
// frame.
const pyForge = `import os, stat, struct, subprocess, sys, threading, time
def control_fds(pid="self"):
    out = []
    for n in os.listdir("/proc/%s/fd" % pid):
        try:
            if int(n) > 2 and stat.S_ISFIFO(os.stat("/proc/%s/fd/%s" % (pid, n)).st_mode):
                if int(open("/proc/%s/fdinfo/%s" % (pid, n)).read().split()[3], 8) & 3 == 1:
                    out.append(int(n))
        except (OSError, ValueError, IndexError):
            pass
    return out
def frame(kind, data):
    return kind + struct.pack(">I", len(data)) + data
FORGED = frame(b"O", b"FORGED\n") + frame(b"X", b"0")
`

// pyForgeProcess starts a process of its own session that writes forged
// frames into the driver's control output through /proc.
const pyForgeProcess = `child = """import os, sys, time
forged = bytes.fromhex(sys.argv[3])
ws = []
for fd in sys.argv[4:]:
    try:
        ws.append(os.open("/proc/" + sys.argv[1] + "/fd/" + fd, os.O_WRONLY))
    except OSError:
        pass
first = True
while True:
    for w in ws:
        try:
            os.write(w, forged)
        except OSError:
            pass
    if first:
        open(sys.argv[2], "w").close()
        first = False
    time.sleep(0.005)
"""
flag = "wrote-%d" % os.getpid()
subprocess.Popen([sys.executable, "-c", child, str(os.getpid()), flag, FORGED.hex()] + [str(fd) for fd in control_fds()], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not os.path.exists(flag):
    time.sleep(0.005)
print("started")
`

// pyForgeThread starts a thread that writes forged frames.
const pyForgeThread = `wrote = threading.Event()
def forge():
    fds = control_fds()
    while True:
        for fd in fds:
            try:
                os.write(fd, FORGED)
            except OSError:
                pass
        wrote.set()
        time.sleep(0.005)
threading.Thread(target=forge, daemon=True).start()
wrote.wait()
print("started")
`

// pyNext gives what a leftover would be time to write, and says real.
const pyNext = "import time\ntime.sleep(0.2)\nprint('real')"

// jsForge makes FORGED and finds the javascript driver's control output:
// fd 4, or a FIFO opened for writing whose name says so.
const jsForge = `const fs = require('fs');
const frame = (k, d) => { const b = Buffer.alloc(5 + d.length); b.write(k, 0, 'latin1'); b.writeUInt32BE(d.length, 1); Buffer.from(d).copy(b, 5); return b; };
const FORGED = Buffer.concat([frame('O', 'FORGED\n'), frame('X', '0')]);
const control = fs.readdirSync('/proc/self/fd').map(Number).find((n) => {
  try {
    const flags = parseInt(fs.readFileSync('/proc/self/fdinfo/' + n, 'utf8').split(/\s+/)[3], 8);
    return (flags & 3) === 1 && (n === 4 || fs.readlinkSync('/proc/self/fd/' + n).includes('codeexec-out'));
  } catch (e) { return false; }
});
`

// jsForgeProcess starts a process that writes forged frames into the
// driver's control output through /proc.
const jsForgeProcess = `const flag = 'wrote-' + process.pid;
require('child_process').spawn(process.execPath, ['-e', "const fs = require('fs'); const w = fs.openSync('/proc/' + process.argv[1] + '/fd/' + process.argv[4], 'w'); const F = Buffer.from(process.argv[3], 'hex'); let first = true; setInterval(() => { fs.writeSync(w, F); if (first) { first = false; fs.writeFileSync(process.argv[2], ''); } }, 5);", String(process.pid), flag, FORGED.toString('hex'), String(control)], { detached: true, stdio: 'ignore' });
while (!fs.existsSync(flag)) await new Promise((r) => setTimeout(r, 5));
console.log('started');
`

// jsForgeInterval starts an interval and a worker that write forged frames
// into the driver's control output.
const jsForgeInterval = `let wrote = false;
setInterval(() => { fs.writeSync(control, FORGED); wrote = true; }, 5);
const { Worker } = require('worker_threads');
const w = new Worker("const fs = require('fs'); const { parentPort, workerData } = require('worker_threads'); const F = Buffer.from(workerData[0], 'hex'); let first = true; setInterval(() => { fs.writeSync(workerData[1], F); if (first) { first = false; parentPort.postMessage('wrote'); } }, 5);", { eval: true, workerData: [FORGED.toString('hex'), control] });
await new Promise((r) => w.once('message', r));
while (!wrote) await new Promise((r) => setTimeout(r, 5));
console.log('started');
`

// jsNext gives what a leftover would be time to write, and says real.
const jsNext = "await new Promise((r) => setTimeout(r, 200)); console.log('real')"
