//go:build linux

package executor_test

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// preloadSpec is a run whose "interpreter", /bin/sh, is started ahead with
// script as its bootstrap.
func preloadSpec(t *testing.T, script string) executor.Spec {
	t.Helper()
	return executor.Spec{
		Path: "/bin/sh", Args: []string{"-c", script}, Env: []string{"PATH=" + executor.MinimalPath},
		Dir: t.TempDir(), Limits: sandbox.Limits{Timeout: time.Minute, OutputBytes: 1 << 20},
		Rlimits: true, NoNewPrivs: true, Preload: &executor.Preload{},
	}
}

// wait waits for c, or fails after a minute.
func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not happen", what)
	}
}

// The interpreter started ahead loads before its run, and says so; at the
// hand-over it gets its message on fd 3, then the end of it, and the run's
// stdin and output are the program's.
func TestPreloadHandOver(t *testing.T) {
	spec := preloadSpec(t, `printf '\026' >&3; m=$(cat <&3); exec 3<&-; printf 'message=%s\n' "$m"; cat; ls /proc/self/fd`)
	p, err := executor.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wait(t, p.Loaded(), "the interpreter's loading")
	spec.Stdin = "the run's stdin\n"
	spec.Preload = &executor.Preload{Message: []byte("go")}
	res := &sandbox.Result{}
	if err := executor.SpawnPrepared(context.Background(), p, spec, res); err != nil {
		t.Fatal(err)
	}
	if want := "message=go\nthe run's stdin\n0\n1\n2\n3\n"; res.ExitCode != 0 || res.Stdout != want {
		t.Fatalf("exit %d, stdout %q, stderr %q; want stdout %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
}

// An interpreter started ahead that is gone before it took its run's
// message makes a run that never began: the server may start it afresh.
func TestPreloadGoneIsNotBegun(t *testing.T) {
	spec := preloadSpec(t, `printf '\026' >&3; exec sleep 600`)
	p, err := executor.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wait(t, p.Loaded(), "the interpreter's loading")
	interp := sandboxtest.OnlyChild(t, p.PID())
	if err := syscall.Kill(interp, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Its supervisor ends once the interpreter is gone.
	if err := sandboxtest.WaitExited(p.PID(), time.Minute); err != nil {
		t.Fatal(err)
	}
	spec.Preload = &executor.Preload{Message: []byte("go")}
	res := &sandbox.Result{}
	err = executor.SpawnPrepared(context.Background(), p, spec, res)
	if !errors.Is(err, executor.ErrNotBegun) {
		t.Fatalf("err = %v, result %+v; want a run that never began", err, res)
	}
}

// A prepared run whose interpreter does not load reports it: Failed, not
// Loaded.
func TestPreloadFailedToLoad(t *testing.T) {
	p, err := executor.Prepare(preloadSpec(t, `exit 3`))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wait(t, p.Failed(), "the failure")
	select {
	case <-p.Loaded():
		t.Fatal("Loaded and Failed are both closed")
	default:
	}
}

// A run whose time limit runs out while its interpreter, started ahead, is
// still loading has timed out, like any run that takes too long: it is not
// a failure of the sandbox.
func TestTimeoutWhileLoadingIsATimeout(t *testing.T) {
	spec, p, _ := prepareGated(t, `echo never`)
	spec.Limits.Timeout = time.Second // it never loads: nothing opens the gate
	res := &sandbox.Result{}
	if err := executor.SpawnPrepared(context.Background(), p, spec, res); err != nil {
		t.Fatalf("SpawnPrepared: %v; want a timed-out result", err)
	}
	if !res.TimedOut || res.ExitCode != 137 || res.Stdout != "" {
		t.Fatalf("timed out %v, exit %d, stdout %q; want a timeout, exit 137, no output", res.TimedOut, res.ExitCode, res.Stdout)
	}
}

// prepareGated prepares a run whose interpreter, started ahead, loads only
// once the FIFO gate (a path) is opened for writing, then runs script once
// it has its message; spec is the run's, with that message.
func prepareGated(t *testing.T, script string) (spec executor.Spec, p *executor.Prepared, gate string) {
	t.Helper()
	spec = preloadSpec(t, `read -r x <gate; printf '\026' >&3; m=$(cat <&3); exec 3<&-; `+script)
	gate = filepath.Join(spec.Dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := executor.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	spec.Preload = &executor.Preload{Message: []byte("go")}
	return spec, p, gate
}
