package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The fixture: testdata/fixture is a module whose packages pass, fail,
// skip for the reasons of this repository's tests, do not build, and have
// no tests; testdata/fixture.jsonl is go test -json's output on it, and
// testdata/fixture.golden what this command prints of it.
const (
	fixtureDir    = "testdata/fixture"
	fixtureEvents = "testdata/fixture.jsonl"
	fixtureGolden = "testdata/fixture.golden"
)

var update = flag.Bool("update", false, "record "+fixtureEvents+" from go test -json again, and write "+fixtureGolden)

// fixtureArgs are go test's arguments for the fixture.
var fixtureArgs = []string{"-count=1", "./..."}

// durations are the times in go test's output, which change from run to
// run.
var durations = regexp.MustCompile(`\d+\.\d+s\b`)

func normalize(s string) string { return durations.ReplaceAllString(s, "0.000s") }

// replay is what the command prints of the recorded events: stdout, stderr.
func replay(t *testing.T, verbose bool) (string, string) {
	t.Helper()
	events, err := os.Open(fixtureEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	var out, errOut bytes.Buffer
	r := newReport(&out, &errOut, verbose, "example.com/fixture")
	if err := r.read(events); err != nil {
		t.Fatal(err)
	}
	r.finish(true) // go test exited 1: a package failed
	return out.String(), errOut.String()
}

func needGo(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to run the fixture's tests with")
	}
}

// The recorded events become what go test prints without -json (each
// package's ok line; the failing test's output, as go test -v shows it;
// the failing packages' FAIL lines; build errors on stderr), then one line
// per group of skipped tests, with the count, the packages and how to run
// them, and each reason that no group takes on a line of its own.
func TestReplay(t *testing.T) {
	if *update {
		needGo(t)
		cmd := exec.Command("go", append([]string{"test", "-json"}, fixtureArgs...)...)
		cmd.Dir = fixtureDir
		out, err := cmd.Output()
		if _, ok := err.(*exec.ExitError); !ok && err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fixtureEvents, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut := replay(t, false)
	if *update {
		if err := os.WriteFile(fixtureGolden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(fixtureGolden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("the fixture's events printed\n%s\nwant (%s; go test ./cmd/codeexec-test -update rewrites it)\n%s", out, fixtureGolden, want)
	}
	if !strings.Contains(errOut, `nobuild/nobuild.go:5:28: cannot use "forty-two"`) {
		t.Errorf("stderr does not have the build error:\n%s", errOut)
	}
}

// With -v every line of output is printed as it comes, then go test's last
// FAIL and the summary.
func TestReplayVerbose(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(fixtureEvents)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		var e event
		if json.Unmarshal([]byte(line), &e) == nil && e.Action == "output" {
			all.WriteString(e.Output)
		}
	}
	out, _ := replay(t, true)
	_, summary, _ := strings.Cut(string(mustRead(t, fixtureGolden)), "\nskipped: ")
	if want := all.String() + "FAIL\n\nskipped: " + summary; out != want {
		t.Errorf("with -v the fixture's events printed\n%s\nwant\n%s", out, want)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The command itself on the fixture, with the real go test: go test's exit
// status, and the golden output (packages end in any order with -json).
func TestRunFixture(t *testing.T) {
	t.Parallel()
	needGo(t)
	var out, errOut bytes.Buffer
	if code := run(fixtureDir, fixtureArgs, &out, &errOut); code != 1 {
		t.Errorf("exit status %d, want go test's 1; stderr:\n%s", code, errOut.String())
	}
	got, want := normalize(out.String()), normalize(string(mustRead(t, fixtureGolden)))
	gotTests, gotSummary, _ := strings.Cut(got, "\nskipped: ")
	wantTests, wantSummary, _ := strings.Cut(want, "\nskipped: ")
	if gotSummary != wantSummary {
		t.Errorf("the summary is\nskipped: %s\nwant\nskipped: %s", gotSummary, wantSummary)
	}
	if g, w := sortedLines(gotTests), sortedLines(wantTests); !slices.Equal(g, w) {
		t.Errorf("go test's part of the output is\n%s\nwant, in any order, the lines of\n%s", gotTests, wantTests)
	}
	if !strings.Contains(errOut.String(), `nobuild/nobuild.go:5:28: cannot use "forty-two"`) {
		t.Errorf("stderr does not have the build error:\n%s\nstdout:\n%s", errOut.String(), out.String())
	}
}

func sortedLines(s string) []string {
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return lines
}

// A run that passes exits 0 and still says what it skipped.
func TestRunPasses(t *testing.T) {
	t.Parallel()
	needGo(t)
	var out, errOut bytes.Buffer
	if code := run(fixtureDir, []string{"-count=1", "./engine/"}, &out, &errOut); code != 0 {
		t.Errorf("exit status %d, want 0; stderr:\n%s", code, errOut.String())
	}
	want := "ok  \texample.com/fixture/engine\t0.000s\n\n" +
		"skipped: 4 tests, by reason (how to run each: docs/development.md#skipped-tests)\n" +
		"     2  no sandbox image (in engine): " + groups[classify("the sandbox image")].enable + "\n" +
		"     1  -short (in engine): run without -short\n" +
		"     1  no Docker Engine (in engine): " + groups[classify("no Docker Engine answers")].enable + "\n"
	if got := normalize(out.String()); got != want {
		t.Errorf("printed\n%s\nwant\n%s", got, want)
	}
}

// The arguments go to go test in place of the default ones; -json, which
// the command reads itself, is refused with the reason.
func TestArguments(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(fixtureDir, []string{"-json", "./..."}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "-json is not passed on") {
		t.Errorf("with -json: exit status %d, stderr %q; want 2 and the reason", code, errOut.String())
	}
	for _, c := range []struct {
		args []string
		name string
		want bool
	}{
		{[]string{"-v", "./..."}, "v", true},
		{[]string{"--v"}, "v", true},
		{[]string{"-test.v=true"}, "v", true},
		{[]string{"-v=false"}, "v", false},
		{[]string{"-run", "TestX", "./..."}, "v", false},
		{[]string{"./...", "-args", "-v"}, "v", false},
		{[]string{"-bench=.", "./..."}, "bench", true},
		{[]string{"-bench", ".", "./..."}, "bench", true},
		{[]string{"-benchtime=1x"}, "bench", false},
	} {
		if got := hasFlag(c.args, c.name); got != c.want {
			t.Errorf("hasFlag(%q, %q) = %v, want %v", c.args, c.name, got, c.want)
		}
	}
	if !slices.Equal(defaultArgs, []string{"-race", "-count=1", "./..."}) {
		t.Errorf("the default arguments are %q, not the README's go test -race -count=1 ./...", defaultArgs)
	}
}

// A skip's reason is the last entry the test logged, on one line.
func TestSkipReason(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		lines []string
		want  string
	}{
		{[]string{"    x_test.go:3: no engine\n", "--- SKIP: TestX (0.00s)\n"}, "no engine"},
		{[]string{"    x_test.go:3: looking\n", "    x_test.go:4: first line\n", "        second line\n", "--- SKIP: TestX (0.00s)\n"}, "first line second line"},
		{[]string{"    x_test.go:3: one part ", "of a long line\n", "--- SKIP: TestX (0.00s)\n"}, "one part of a long line"},
		{[]string{"--- SKIP: TestX (0.00s)\n"}, ""},
	} {
		if got := skipReason(c.lines); got != c.want {
			t.Errorf("skipReason(%q) = %q, want %q", c.lines, got, c.want)
		}
	}
}

// The module's path is read from the go.mod above the directory.
func TestModulePath(t *testing.T) {
	if got := modulePath(filepath.Join(fixtureDir, "engine")); got != "example.com/fixture" {
		t.Errorf("modulePath = %q, want example.com/fixture", got)
	}
	if got := modulePath("."); got != "github.com/codeexec/codeexec" {
		t.Errorf("modulePath = %q, want github.com/codeexec/codeexec", got)
	}
}

// A package that never ended (go test was stopped, or its binary died
// without a word) has its tests' output printed at the end, as a failure,
// and its skips counted.
func TestUnfinishedPackage(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	r := newReport(&out, &errOut, false, "example.com/m")
	for _, e := range []string{
		`{"Action":"start","Package":"example.com/m/p"}`,
		`{"Action":"run","Package":"example.com/m/p","Test":"TestSkips"}`,
		`{"Action":"output","Package":"example.com/m/p","Test":"TestSkips","Output":"=== RUN   TestSkips\n"}`,
		`{"Action":"output","Package":"example.com/m/p","Test":"TestSkips","Output":"    p_test.go:3: -short: needs Chromium\n"}`,
		`{"Action":"skip","Package":"example.com/m/p","Test":"TestSkips"}`,
		`{"Action":"run","Package":"example.com/m/p","Test":"TestHangs"}`,
		`{"Action":"output","Package":"example.com/m/p","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}`,
		`{"Action":"output","Package":"example.com/m/p","Test":"TestHangs","Output":"    p_test.go:9: waiting\n"}`,
	} {
		r.line([]byte(e + "\n"))
	}
	r.finish(true)
	want := "    p_test.go:9: waiting\nFAIL\n\n" +
		"skipped: 1 test, by reason (how to run each: docs/development.md#skipped-tests)\n" +
		"     1  -short (in p): run without -short\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
}

// A package that times out right after a test passed: test2json gives the
// panic and the goroutine dump to the passed test, as output that comes
// before its pass. They are the package's failure and are printed with it;
// what the test itself logged is not. The last line says again which
// tests were running, as a log's tail is often all that is read.
func TestTimeoutAfterAPass(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	r := newReport(&out, &errOut, false, "example.com/m")
	const p = `"Package":"example.com/m/p"`
	for _, e := range []string{
		`{"Action":"start",` + p + `}`,
		`{"Action":"run",` + p + `,"Test":"TestHang"}`,
		`{"Action":"output",` + p + `,"Test":"TestHang","Output":"=== RUN   TestHang\n"}`,
		`{"Action":"run",` + p + `,"Test":"TestX"}`,
		`{"Action":"output",` + p + `,"Test":"TestX","Output":"=== RUN   TestX\n"}`,
		`{"Action":"output",` + p + `,"Test":"TestX","Output":"    p_test.go:7: the test's own log\n"}`,
		`{"Action":"output",` + p + `,"Test":"TestX","Output":"--- PASS: TestX (0.50s)\n"}`,
		`{"Action":"output",` + p + `,"Test":"TestX","Output":"panic: test timed out after 3s\n"}`,
		`{"Action":"output",` + p + `,"Test":"TestX","Output":"\trunning tests:\n"}`,
		`{"Action":"output",` + p + `,"Test":"TestX","Output":"\t\tTestHang (3s)\n"}`,
		`{"Action":"pass",` + p + `,"Test":"TestX","Elapsed":0.5}`,
		`{"Action":"output",` + p + `,"Output":"FAIL\texample.com/m/p\t3.004s\n"}`,
		`{"Action":"fail",` + p + `,"Elapsed":3.004}`,
	} {
		r.line([]byte(e + "\n"))
	}
	r.finish(true)
	want := "panic: test timed out after 3s\n\trunning tests:\n\t\tTestHang (3s)\nFAIL\texample.com/m/p\t3.004s\nFAIL\n\nskipped: none\n" +
		"\np: panic: test timed out after 3s; the tests running then: TestHang (3s) (the dump is above)\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
}

// The failing tests are said again at the end, in short: each one's first
// entries, first lines only and cut to entryWidth, a parent's left out when
// a subtest of it was said, within maxFailureLines lines in all.
func TestFailuresSaidLast(t *testing.T) {
	var in bytes.Buffer
	emit := func(test, output string) {
		b, _ := json.Marshal(event{Action: "output", Package: "m/e2e", Test: test, Output: output})
		in.Write(append(b, '\n'))
	}
	end := func(action, test string) {
		b, _ := json.Marshal(event{Action: action, Package: "m/e2e", Test: test})
		in.Write(append(b, '\n'))
	}
	emit("TestLoad", "    load_test.go:41: the parent logs\n")
	emit("TestLoad/stdio", "    load_test.go:75: warm: 32 calls\n")
	emit("TestLoad/stdio", "    load_test.go:225: call 7: "+strings.Repeat("x", 500)+"\n")
	emit("TestLoad/stdio", "    main_test.go:435: codeexec (stdio) stderr:\n        {\"msg\":\"run\"}\n")
	end("fail", "TestLoad/stdio")
	end("fail", "TestLoad")
	for i := range 20 {
		name := "TestMany" + strconv.Itoa(i)
		for j := range 3 {
			emit(name, "    many_test.go:"+strconv.Itoa(10+j)+": entry\n")
		}
		end("fail", name)
	}
	end("fail", "")
	var out bytes.Buffer
	r := newReport(&out, io.Discard, false, "m")
	if err := r.read(&in); err != nil {
		t.Fatal(err)
	}
	r.finish(true)
	_, tail, ok := strings.Cut(out.String(), "\nwhat the failing tests logged first (21 tests;")
	if !ok {
		t.Fatalf("no summary of the failing tests in\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSuffix(tail, "\n"), "\n")[1:]
	if len(lines) > maxFailureLines {
		t.Errorf("%d lines of failures, want at most %d:\n%s", len(lines), maxFailureLines, tail)
	}
	want := []string{
		"  e2e TestLoad/stdio",
		"    load_test.go:75: warm: 32 calls",
		"    load_test.go:225: call 7: " + strings.Repeat("x", entryWidth-len("load_test.go:225: call 7: ")) + " …",
		"    main_test.go:435: codeexec (stdio) stderr:",
		"  e2e TestMany0",
	}
	if !slices.Equal(lines[:len(want)], want) {
		t.Errorf("the failures' summary starts\n%s\nwant\n%s", strings.Join(lines[:len(want)], "\n"), strings.Join(want, "\n"))
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "  and ") || !strings.HasSuffix(last, " more failing tests") {
		t.Errorf("the last line is %q, want the number of failing tests not said", last)
	}
	if strings.Contains(tail, "e2e TestLoad\n") {
		t.Errorf("the parent of a said subtest is said too:\n%s", tail)
	}
}
