package process_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// startTime is the start time of process pid (field 22 of its stat, in
// clock ticks since boot): the same for it in every PID namespace.
func startTime(t *testing.T, stat string) string {
	t.Helper()
	i := strings.LastIndexByte(stat, ')')
	f := strings.Fields(stat[i+1:])
	if i < 0 || len(f) < 20 {
		t.Fatalf("unreadable stat %q", stat)
	}
	return f[19]
}

// The interpreter of python and of javascript is started ahead, in the
// run's sandbox: before any request it exists as the only child of a
// prepared run's supervisor, is the language's interpreter and has loaded;
// the request's program then runs in that very process.
func TestInterpreterStartedAhead(t *testing.T) {
	r := newLoadedRunner(t)
	for _, c := range []struct{ lang, code string }{
		{"python", "print(open('/proc/self/stat').read())"},
		{"javascript", "console.log(require('fs').readFileSync('/proc/self/stat', 'utf8'))"},
	} {
		t.Run(c.lang, func(t *testing.T) {
			sup := waitLoaded(t, r, c.lang)
			pid := sandboxtest.OnlyChild(t, sup)
			st, _ := r.Capabilities().Language(c.lang)
			exe, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/exe")
			if err != nil {
				t.Fatal(err)
			}
			interp, err := os.Stat(st.Interpreter)
			if err != nil {
				t.Fatal(err)
			}
			if !os.SameFile(exe, interp) {
				link, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
				t.Fatalf("the prepared run's process %d runs %s, not the %s interpreter %s: no interpreter was started ahead", pid, link, c.lang, st.Interpreter)
			}
			stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if err != nil {
				t.Fatal(err)
			}
			taken := process.LoadedTaken(r)
			res, err := r.Run(context.Background(), sandboxtest.Req(c.lang, c.code))
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 {
				t.Fatalf("exit %d, stderr %q", res.ExitCode, res.Stderr)
			}
			if got, want := startTime(t, res.Stdout), startTime(t, string(stat)); got != want {
				t.Fatalf("the program ran in a process started at tick %s, not in the interpreter started ahead (tick %s)", got, want)
			}
			if process.LoadedTaken(r) != taken+1 {
				t.Fatalf("the run was not counted as served by a loaded interpreter")
			}
		})
	}
}

// sameView is what a program sees of itself, its files, its input and its
// end, in python and javascript: everything must be the same whether its
// interpreter was started ahead or for it.
var sameView = []struct {
	name, lang, code, stdin string
	files                   []artifacts.Input
}{
	{name: "python", lang: "python", stdin: "in\n", files: []artifacts.Input{{Path: "data/in.txt", Data: []byte("file\n")}}, code: `
import os, resource, signal, sys
print(sys.argv, sys.orig_argv[1:], __file__, __name__, type(__loader__).__name__, __spec__, sys.path, os.getcwd())
print(sorted(os.environ.items()))
print(sorted(sys.modules))
print(sorted(os.listdir("/proc/self/fd")), sorted(os.listdir(".")), open("data/in.txt").read())
print([resource.getrlimit(i) for i in range(16) if i != resource.RLIMIT_NPROC])
print(os.getuid(), os.getgid(), os.getgroups(), os.getpgrp() == os.getpid(), os.umask(0o22))
print([signal.getsignal(s) for s in sorted(signal.valid_signals()) if s not in (signal.SIGKILL, signal.SIGSTOP)])
print(open("/proc/self/status").read().split("SigBlk:")[1].split()[0])
print(repr(sys.stdin.read()))
open("made.txt", "w").write("out\n")
def deep():
    raise ValueError("boom")
deep()
`},
	{name: "python-no-stdin", lang: "python", code: "import sys\nprint(repr(sys.stdin.read()))\nsys.exit(3)"},
	{name: "python-signal", lang: "python", code: "import os, signal\nprint('bye', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)"},
	{name: "javascript", lang: "javascript", stdin: "in\n", files: []artifacts.Input{{Path: "data/in.txt", Data: []byte("file\n")}}, code: `
const fs = require('fs');
console.log(process.argv, process.execArgv, __filename, require.main === module, process.cwd(), process._eval);
console.log(Object.entries(process.env).sort());
console.log(Object.keys(globalThis).sort(), typeof module, typeof require);
console.log(fs.readdirSync('/proc/self/fd').sort(), fs.readdirSync('.').sort(), fs.readFileSync('data/in.txt', 'utf8'));
console.log(process.getuid(), process.getgid(), process.getgroups());
console.log(fs.readFileSync('/proc/self/status', 'utf8').split('SigBlk:')[1].split(/\s/)[1]);
console.log(JSON.stringify(fs.readFileSync(0, 'utf8')));
fs.writeFileSync('made.txt', 'out\n');
function deep() { throw new Error('boom'); }
deep();
`},
	{name: "javascript-no-stdin", lang: "javascript", code: "console.log(JSON.stringify(require('fs').readFileSync(0, 'utf8')));\nprocess.exit(3)"},
	{name: "javascript-signal", lang: "javascript", code: "console.log('bye');\nprocess.kill(process.pid, 'SIGTERM')"},
}

// A program sees the same on an interpreter started ahead as on one
// started for it: argv, its file, its module, the search path, the
// environment (the request's included), the loaded modules, its
// descriptors, files, limits, user, signals, stdin (or its end), its exit
// status or signal, its traceback, and the artifacts it leaves. The run
// directory's name differs (prepared-* or run-*), and a javascript stack
// ends, below Node's entry point, in the bootstrap's frames.
func TestStartedAheadSeesTheSame(t *testing.T) {
	r := newLoadedRunner(t)
	ctx := context.Background()
	dirs := regexp.MustCompile(`/(prepared|run)-[0-9]+`)
	normal := func(s string) string {
		s = dirs.ReplaceAllString(s, "/<run>")
		var out []string
		for _, line := range strings.Split(s, "\n") {
			out = append(out, line)
			if strings.Contains(line, "at Function.executeUserEntryPoint [as runMain]") {
				break // below it: how the entry point was called
			}
		}
		return strings.Join(out, "\n")
	}
	for _, c := range sameView {
		t.Run(c.name, func(t *testing.T) {
			req := sandboxtest.Req(c.lang, c.code)
			req.Stdin, req.Files, req.Artifacts = c.stdin, c.files, &artifacts.Options{}
			req.Env = []string{"CODEEXEC_RUN_TOKEN=token-of-the-request", "HOME=/elsewhere"}
			waitLoaded(t, r, c.lang)
			taken := process.LoadedTaken(r)
			ahead, err := r.Run(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if process.LoadedTaken(r) != taken+1 {
				t.Fatal("the run was not served by an interpreter started ahead")
			}
			cold, err := process.RunOnDemand(ctx, r, req)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct{ what, ahead, cold string }{
				{"stdout", normal(ahead.Stdout), normal(cold.Stdout)},
				{"stderr", normal(ahead.Stderr), normal(cold.Stderr)},
				{"exit", strconv.Itoa(ahead.ExitCode) + " " + ahead.Signal, strconv.Itoa(cold.ExitCode) + " " + cold.Signal},
				{"artifacts", artifactList(ahead), artifactList(cold)},
			} {
				if f.ahead != f.cold {
					t.Errorf("%s differs:\nstarted ahead: %s\nstarted for the run: %s", f.what, f.ahead, f.cold)
				}
			}
			if !strings.Contains(ahead.Stdout+ahead.Stderr, "token-of-the-request") && c.name == c.lang {
				t.Errorf("the request's environment did not reach the program: %q", ahead.Stdout)
			}
		})
	}
}

func artifactList(res *sandbox.Result) string {
	if res.Artifacts == nil {
		return "none"
	}
	var s []string
	for _, a := range res.Artifacts.Artifacts {
		s = append(s, a.Path+"="+string(a.Data))
	}
	return strings.Join(s, ",")
}

// An interpreter started ahead that is killed while it waits is discarded
// (its run never began): the next request runs as usual, and its result is
// its own program's.
func TestStartedAheadKilled(t *testing.T) {
	r := newLoadedRunner(t)
	pid := sandboxtest.OnlyChild(t, waitLoaded(t, r, "python"))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitExited(pid, time.Minute); err != nil {
		t.Fatalf("the killed interpreter: %v", err)
	}
	res, err := r.Run(context.Background(), sandboxtest.Req("python", "print(6*7)"))
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "42" {
		t.Fatalf("%+v %v", res, err)
	}
	// And interpreters are started ahead again.
	waitLoaded(t, r, "python")
}

// Restricted Python keeps its promises on interpreters started ahead with
// its modules imported and its bootstrap compiled, as the server starts
// them: ordinary code runs, and escapes are refused with the rule and the
// line.
func TestRestrictedPythonStartedAhead(t *testing.T) {
	base := newLoadedRunner(t, func(c *process.Config) { c.PythonPreload, c.PythonPrelude = pypolicy.Imports, pypolicy.Prelude() })
	r := pypolicy.Wrap(base, pypolicy.Policy{AllowedImports: pypolicy.DefaultAllowedImports})
	ctx := context.Background()
	pid := sandboxtest.OnlyChild(t, waitLoaded(t, base, "python"))
	// python -I -B -c PRELOAD FILE PRELUDE COMPILED MODULE...: the
	// bootstrap was compiled once, not by each interpreter.
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Split(string(cmdline), "\x00")
	c := slices.Index(argv, "-c")
	if c < 0 || len(argv) < c+6 || argv[c+3] != "" || !strings.HasSuffix(argv[c+4], "/python-prelude") {
		t.Fatalf("the interpreter started ahead did not get the bootstrap compiled: %d arguments", len(argv))
	}
	// Every run loads it: no run may change it, or replace it, for the
	// next ones (a run without the policy tries).
	compiled := argv[c+4]
	before, err := os.ReadFile(compiled)
	if err != nil {
		t.Fatal(err)
	}
	tamper := `import os, sys
p = sys.argv[1]
for what, f in [("append", lambda: open(p, "ab").write(b"x")), ("chmod", lambda: os.chmod(p, 0o666)),
                 ("unlink", lambda: os.unlink(p)), ("rename", lambda: os.rename(os.path.dirname(p), os.path.dirname(p) + ".x")),
                 ("create", lambda: open(p + ".new", "wb"))]:
    try:
        f()
        print(what, "worked")
    except OSError as e:
        print(what, "refused")
`
	res, err := base.Run(ctx, sandboxtest.Req("python", strings.Replace(tamper, "sys.argv[1]", strconv.Quote(compiled), 1)))
	if err != nil || res.ExitCode != 0 || strings.Contains(res.Stdout, "worked") || strings.Count(res.Stdout, "refused") != 5 {
		t.Fatalf("a run could change the compiled bootstrap: %v %+v", err, res)
	}
	if after, err := os.ReadFile(compiled); err != nil || string(after) != string(before) {
		t.Fatalf("the compiled bootstrap changed under a run: %v", err)
	}
	waitLoaded(t, base, "python")
	taken := process.LoadedTaken(base)
	res, err = r.Run(ctx, sandboxtest.Req("python", "import json, sys\nprint(json.dumps({'n': 2**64}))"))
	if err == nil || !strings.HasPrefix(err.Error(), "The restricted Python policy refused line 1:") || !strings.Contains(err.Error(), "(rule import)") {
		t.Fatalf("import sys under the policy: %v %+v", err, res)
	}
	waitLoaded(t, base, "python")
	res, err = r.Run(ctx, sandboxtest.Req("python", "import json\nprint(json.dumps({'n': 2**64}))"))
	if err != nil || res.Stdout != "{\"n\": 18446744073709551616}\n" {
		t.Fatalf("%v %+v", err, res)
	}
	waitLoaded(t, base, "python")
	res, err = r.Run(ctx, sandboxtest.Req("python", "x = 1\n\nraise ValueError('boom')"))
	if err != nil || res.ExitCode != 1 || !strings.Contains(res.Stderr, "File \"main.py\", line 3") {
		t.Fatalf("the traceback does not name the program's line: %v %+v", err, res)
	}
	if got := process.LoadedTaken(base) - taken; got != 3 {
		t.Fatalf("%d of the 3 runs were served by a loaded interpreter", got)
	}
}

// A request that sets a variable that the interpreter reads as it starts
// gets an interpreter started for it.
func TestStartupVariablesGetTheirOwnStart(t *testing.T) {
	r := newLoadedRunner(t)
	waitLoaded(t, r, "python")
	taken := process.LoadedTaken(r)
	req := sandboxtest.Req("python", "import os, time\nprint(os.environ['TZ'], time.tzname[0])")
	req.Env = []string{"TZ=JST-9"}
	res, err := r.Run(context.Background(), req)
	if err != nil || res.Stdout != "JST-9 JST\n" {
		t.Fatalf("%v %+v", err, res)
	}
	if process.LoadedTaken(r) != taken {
		t.Fatal("a run with TZ was served by an interpreter started before it")
	}
}
