// Command codeexec-test is the README's test command. It runs
//
//	go test -race -count=1 ./...
//
// (or go test with the arguments it is given instead), prints what go test
// prints, and ends with what was skipped: one line per group of skipped
// tests with their number, what they lack and how to run them (a
// CODE_EXEC_REQUIRE_* variable makes most fail instead). It reads go test's
// -json events to see each skip and its reason, and exits with go test's
// status.
//
//	go run ./cmd/codeexec-test                      # the whole suite, as CI runs it
//	go run ./cmd/codeexec-test -short ./sandbox/... # the fast loop of some packages
//
// docs/development.md#skipped-tests lists the groups.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
)

// defaultArgs are go test's arguments when none are given: the README's
// command before it said what it skipped.
var defaultArgs = []string{"-race", "-count=1", "./..."}

func main() {
	os.Exit(run("", os.Args[1:], os.Stdout, os.Stderr))
}

// run runs go test -json with args (defaultArgs when there are none) in
// dir ("" is the current directory), writes what go test would print and
// then the summary of skips to stdout (build errors and the go command's
// own messages to stderr), and returns go test's exit status.
func run(dir string, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		args = defaultArgs
	}
	if hasFlag(args, "json") {
		fmt.Fprintln(stderr, "codeexec-test: -json is not passed on: this command reads go test's JSON itself; run go test -json for the events")
		return 2
	}
	// go test's stderr and the build errors of its events, one write at a
	// time.
	stderr = &syncWriter{w: stderr}
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	cmd.Dir = dir
	cmd.Stdin = os.Stdin
	cmd.Stderr = stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "codeexec-test: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "codeexec-test: starting go test: %v\n", err)
		return 2
	}
	// An interrupt or a stop is go test's to handle (it stops the test
	// binaries and reports them): pass it on and stay to say what ran.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()

	r := newReport(stdout, stderr, hasFlag(args, "v") || hasFlag(args, "bench"), modulePath(dir))
	readErr := r.read(events)
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if code = ee.ExitCode(); code <= 0 {
			code = 1 // ended by a signal
		}
	case err != nil:
		fmt.Fprintf(stderr, "codeexec-test: go test: %v\n", err)
		code = 1
	}
	if readErr != nil {
		fmt.Fprintf(stderr, "codeexec-test: reading go test's output: %v\n", readErr)
		if code == 0 {
			code = 1
		}
	}
	r.finish(code != 0)
	return code
}

// syncWriter serializes the writes of goroutines to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
