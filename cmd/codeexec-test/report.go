package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json's TestEvent, and the
// build's events), as far as the report reads it.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// report turns go test's events back into what go test prints without
// -json, and collects the skipped tests for the summary.
//
// Without -v (or -bench), as go test in package list mode: a passing
// package's "ok" line alone; a failing package's output: its failing tests'
// output (as go test -v shows it, without the === lines) and its own lines.
// With -v or -bench, everything, as it comes.
type report struct {
	out, errOut io.Writer
	verbose     bool
	module      string // the module's path, left out of package names
	pkgs        map[string]*pkgOutput
	skips       []skip
	timeouts    []timeout
	failures    []failure
	ran         bool // go test reported something
	failed      bool // a package failed
}

// timeout is a package that ran into go test's timeout: its panic's first
// line and the tests it names as running. They are said again at the very
// end, as the dump before them can be thousands of lines long and a log's
// tail is often all that is read.
type timeout struct {
	pkg, panic string
	running    []string
}

// failure is a failing test and the first line of each entry it logged
// (t.Error's, t.Log's, a cleanup's): said again at the very end, in short,
// as a failing package's output can be thousands of lines long (a
// server's log, a goroutine dump) and a log's tail is often all that is
// read.
type failure struct {
	pkg, test string
	entries   []string
}

// pkgOutput is what a running package printed that is not printed yet.
type pkgOutput struct {
	lines []string            // the package's own output (not of a test)
	tests map[string][]string // each running test's output
	order []string            // the running tests, in the order they started
	// timeout is set from the line "panic: test timed out after …" on;
	// inRunning while the tests it lists as running follow it.
	timeout   *timeout
	inRunning bool
}

// skip is a skipped test's package and the reason the test gave.
type skip struct {
	pkg, reason string
}

func newReport(out, errOut io.Writer, verbose bool, module string) *report {
	return &report{out: out, errOut: errOut, verbose: verbose, module: module, pkgs: map[string]*pkgOutput{}}
}

// read handles every line of in, go test -json's output.
func (r *report) read(in io.Reader) error {
	br := bufio.NewReader(in)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			r.line(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// line handles one line of go test -json's output; a line that is not an
// event is printed as it is.
func (r *report) line(line []byte) {
	var e event
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
		_, _ = r.out.Write(line)
		return
	}
	r.ran = true
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.errOut, e.Output)
	case "output":
		r.output(e)
	case "pass", "fail", "skip":
		if e.Test != "" {
			r.testEnd(e)
		} else {
			r.packageEnd(e)
		}
	}
}

func (r *report) pkg(name string) *pkgOutput {
	p := r.pkgs[name]
	if p == nil {
		p = &pkgOutput{tests: map[string][]string{}}
		r.pkgs[name] = p
	}
	return p
}

func (r *report) output(e event) {
	if r.verbose {
		fmt.Fprint(r.out, e.Output)
	}
	p := r.pkg(e.Package)
	p.noteTimeout(e.Package, e.Output)
	if e.Test == "" {
		if !r.verbose {
			p.lines = append(p.lines, e.Output)
		}
		return
	}
	if framing(e.Output) {
		return
	}
	if _, ok := p.tests[e.Test]; !ok {
		p.order = append(p.order, e.Test)
	}
	p.tests[e.Test] = append(p.tests[e.Test], e.Output)
}

// noteTimeout follows go test's timeout panic: its first line, then
// "running tests:" and a line per test, "\t\tTestName (30m0s)".
func (p *pkgOutput) noteTimeout(pkg, line string) {
	switch {
	case p.timeout == nil:
		if strings.HasPrefix(line, "panic: test timed out after ") {
			p.timeout = &timeout{pkg: pkg, panic: strings.TrimSpace(line)}
		}
	case strings.TrimSpace(line) == "running tests:":
		p.inRunning = true
	case p.inRunning && strings.HasPrefix(line, "\t\t"):
		p.timeout.running = append(p.timeout.running, strings.TrimSpace(line))
	default:
		p.inRunning = false
	}
}

// framing reports whether a test's output line is go test -v's framing,
// which go test does not print without -v.
func framing(line string) bool {
	for _, f := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, f) {
			return true
		}
	}
	return false
}

// testEnd handles a test's result: a skip is recorded with its reason; a
// failing test's output goes to its parent's, or is printed for a
// top-level test.
func (r *report) testEnd(e event) {
	p := r.pkg(e.Package)
	lines := p.tests[e.Test]
	delete(p.tests, e.Test)
	p.order = slices.DeleteFunc(p.order, func(n string) bool { return n == e.Test })
	if e.Action != "fail" {
		var stray []string
		lines, stray = afterReport(lines, e.Test)
		if !r.verbose {
			p.lines = append(p.lines, stray...)
		}
	}
	switch e.Action {
	case "skip":
		r.skips = append(r.skips, skip{pkg: e.Package, reason: skipReason(lines)})
	case "fail":
		// A parent's output holds its failing subtests': they are said.
		sub := slices.ContainsFunc(r.failures, func(f failure) bool {
			return f.pkg == e.Package && strings.HasPrefix(f.test, e.Test+"/")
		})
		if entries := logEntries(lines); len(entries) > 0 && !sub {
			r.failures = append(r.failures, failure{pkg: e.Package, test: e.Test, entries: entries})
		}
		if r.verbose {
			return
		}
		if i := strings.LastIndexByte(e.Test, '/'); i > 0 {
			if parent, ok := p.tests[e.Test[:i]]; ok {
				p.tests[e.Test[:i]] = append(parent, lines...)
				return
			}
		}
		fmt.Fprint(r.out, strings.Join(lines, ""))
	}
}

// afterReport splits a test's output at its own "--- PASS: name" (or
// SKIP) line: what comes after it is not the test's but the package's.
// test2json gives a line that no marker names to the test that reported
// last, and sends that test's pass only when the next marker comes; so
// when a package times out right after a test passed, the panic and its
// goroutine dump arrive as that passed test's output, and are the
// package's failure.
func afterReport(lines []string, test string) (own, stray []string) {
	for i, l := range lines {
		l = strings.TrimLeft(l, " ")
		for _, verb := range []string{"--- PASS: ", "--- SKIP: "} {
			if rest, ok := strings.CutPrefix(l, verb); ok && (strings.HasPrefix(rest, test+" (") || strings.TrimSpace(rest) == test) {
				return lines[:i+1], lines[i+1:]
			}
		}
	}
	return lines, nil
}

// packageEnd prints what go test prints of a package that ended.
func (r *report) packageEnd(e event) {
	p := r.pkg(e.Package)
	delete(r.pkgs, e.Package)
	if e.Action == "fail" {
		r.failed = true
	}
	if p.timeout != nil {
		r.timeouts = append(r.timeouts, *p.timeout)
	}
	if r.verbose {
		return
	}
	if e.Action == "fail" {
		// Tests that never ended (a panic, a timeout) first.
		for _, t := range p.order {
			fmt.Fprint(r.out, strings.Join(p.tests[t], ""))
		}
		fmt.Fprint(r.out, strings.Join(p.lines, ""))
		return
	}
	for _, l := range p.lines {
		if strings.HasPrefix(l, "ok  ") || strings.HasPrefix(l, "?   ") || strings.Contains(l, "coverage:") {
			fmt.Fprint(r.out, l)
		}
	}
}

// logEntry is the start of a line that t.Log, t.Skip and the like wrote:
// "    file_test.go:12: ".
var logEntry = regexp.MustCompile(`^\s*[^\s:]+\.go:\d+: ?`)

// logEntries is the first line of each entry in a test's output, each at
// most entryWidth bytes.
func logEntries(lines []string) []string {
	var out []string
	for _, l := range strings.Split(strings.Join(lines, ""), "\n") {
		if logEntry.MatchString(l) {
			l = strings.TrimSpace(l)
			if len(l) > entryWidth {
				l = strings.ToValidUTF8(l[:entryWidth], "") + " …"
			}
			out = append(out, l)
		}
	}
	return out
}

// entryWidth, maxEntries and maxFailureLines bound the failures' summary.
const (
	entryWidth      = 200
	maxEntries      = 6  // per failing test
	maxFailureLines = 16 // in all
)

// skipReason is the reason a skipped test gave: the last entry it logged
// (t.Skip's message), on one line.
func skipReason(lines []string) string {
	text := strings.Split(strings.Join(lines, ""), "\n")
	var reason []string
	for _, l := range text {
		switch {
		case strings.HasPrefix(l, "--- "):
		case logEntry.MatchString(l):
			reason = []string{strings.TrimSpace(l[len(logEntry.FindString(l)):])}
		case reason != nil && strings.TrimSpace(l) != "":
			reason = append(reason, strings.TrimSpace(l))
		}
	}
	return strings.Join(reason, " ")
}

// finish prints what packages that never ended (go test was stopped)
// printed, go test's last line when a package failed, and the summary of
// skips.
func (r *report) finish(failed bool) {
	for _, name := range slices.Sorted(maps.Keys(r.pkgs)) {
		r.packageEnd(event{Action: "fail", Package: name})
	}
	if r.failed && failed {
		fmt.Fprintln(r.out, "FAIL")
	}
	if !r.ran {
		return
	}
	writeSummary(r.out, r.skips, r.module)
	for _, t := range r.timeouts {
		running := "none named"
		if len(t.running) > 0 {
			running = strings.Join(t.running, ", ")
		}
		fmt.Fprintf(r.out, "\n%s: %s; the tests running then: %s (the dump is above)\n", shortPackage(t.pkg, r.module), t.panic, running)
	}
	r.writeFailures()
}

// writeFailures ends the output with the failing tests and the first
// entries each logged, within maxFailureLines lines.
func (r *report) writeFailures() {
	if len(r.failures) == 0 {
		return
	}
	fmt.Fprintf(r.out, "\nwhat the failing tests logged first (%d tests; each entry's first line, the whole output is above):\n", len(r.failures))
	left := maxFailureLines - 1 // one is kept for "and N more"
	for i, f := range r.failures {
		if left < 2 {
			fmt.Fprintf(r.out, "  and %d more failing tests\n", len(r.failures)-i)
			return
		}
		fmt.Fprintf(r.out, "  %s %s\n", shortPackage(f.pkg, r.module), f.test)
		left--
		n := min(len(f.entries), maxEntries, left)
		for _, e := range f.entries[:n] {
			fmt.Fprintf(r.out, "    %s\n", e)
		}
		left -= n
		if more := len(f.entries) - n; more > 0 && left > 0 {
			fmt.Fprintf(r.out, "    (%d more entries)\n", more)
			left--
		}
	}
}

// modulePath is the path of the module whose go.mod is in dir or above
// it ("" when there is none).
func modulePath(dir string) string {
	d, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if m, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
					return strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			return ""
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
}

// hasFlag reports whether go test's arguments set the flag name ("v" for
// -v, -v=true, --v; -v=false does not count), before any -args.
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "-args" || a == "--args" {
			return false
		}
		f, ok := strings.CutPrefix(a, "-")
		if !ok {
			continue
		}
		f = strings.TrimPrefix(f, "-")
		f = strings.TrimPrefix(f, "test.")
		f, value, hasValue := strings.Cut(f, "=")
		if f == name && !(hasValue && value == "false") {
			return true
		}
	}
	return false
}
