//go:build linux

package process_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

func newPooledRunner(t *testing.T) *process.Runner {
	t.Helper()
	r, err := process.New(context.Background(), process.Config{Languages: sandbox.LanguageNames(), WorkRoot: WorkRoot(t), PoolSize: 1})
	if err != nil {
		t.Fatalf("process.New: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// waitPrepared waits until the runner has a run prepared, and returns its
// supervisor's pid.
func waitPrepared(t *testing.T, r *process.Runner) int {
	t.Helper()
	pid, err := process.WaitPrepared(t.Context(), r)
	if err != nil {
		t.Fatalf("no run was prepared: %v", err)
	}
	return pid
}

// Every behaviour of a run holds on prepared runs too, and on those whose
// interpreter was started ahead.
func TestSuitePrepared(t *testing.T) {
	r := newPooledRunner(t)
	waitPrepared(t, r)
	sandboxtest.RunSuite(t, r, sandboxtest.Options{Mode: sandbox.ModeProcess, ScrubsEnv: true})
	if process.PreparedTaken(r) == 0 {
		t.Fatal("no request was served by a prepared run")
	}
}

// As TestSuitePrepared, with the suite's limits known from the start: the
// suite's requests find interpreters started ahead.
func TestSuiteStartedAhead(t *testing.T) {
	r := newLoadedRunner(t)
	waitLoaded(t, r, "python")
	sandboxtest.RunSuite(t, r, sandboxtest.Options{Mode: sandbox.ModeProcess, ScrubsEnv: true})
	if process.LoadedTaken(r) == 0 {
		t.Fatal("no request was served by an interpreter started ahead")
	}
}

// A prepared run serves one request: the next sees nothing of it, and runs
// on a supervisor of its own.
func TestPreparedRunsAreFresh(t *testing.T) {
	r := newPooledRunner(t)
	ctx := context.Background()
	seen := map[int]bool{}
	for i := range 4 {
		pid := waitPrepared(t, r)
		if seen[pid] {
			t.Fatalf("supervisor %d prepared twice", pid)
		}
		seen[pid] = true
		taken := process.PreparedTaken(r)
		res, err := r.Run(ctx, sandboxtest.Req("python", `
import os
print(sorted(f for f in os.listdir(".") if not f.startswith("main")))
open("left-behind", "w").write("x")
`))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(res.Stdout); got != "[]" {
			t.Fatalf("run %d found files of an earlier run: %s (stderr %q)", i, got, res.Stderr)
		}
		if process.PreparedTaken(r) != taken+1 {
			t.Fatalf("run %d was not served by the prepared run", i)
		}
	}
}

// A prepared supervisor killed while it waits is discarded: the next
// request still runs.
func TestPreparedRunKilled(t *testing.T) {
	r := newPooledRunner(t)
	pid := waitPrepared(t, r)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Dead (a zombie: the runner has not waited for it yet): the pidfd
	// becomes readable when it exits.
	if err := sandboxtest.WaitExited(pid, time.Minute); err != nil {
		t.Fatalf("the killed supervisor: %v", err)
	}
	res, err := r.Run(context.Background(), sandboxtest.Req("python", "print(6*7)"))
	if err != nil || strings.TrimSpace(res.Stdout) != "42" {
		t.Fatalf("%+v %v", res, err)
	}
}

// Close leaves no prepared supervisor behind (and WorkRoot checks that no
// run directory is left).
func TestPreparedRunsClosed(t *testing.T) {
	r, err := process.New(context.Background(), process.Config{Languages: []string{"python"}, WorkRoot: WorkRoot(t), PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	pid := waitPrepared(t, r)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// The supervisor was waited for by Close: its pid is free or reused
	// by something that is not a child of this test.
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != syscall.ECHILD {
		t.Fatalf("prepared supervisor %d is still a child after Close: %v", pid, err)
	}
}
