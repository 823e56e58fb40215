//go:build linux

package executor

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codeexec/codeexec/sandbox/internal/seccompfilter"
)

// TestApplySeccompRefuses: the filter as the server assembles it, installed
// from its bytes as the exec stage does, refuses what it promises to in
// this process and every thread of it, and lets the rest through. The test
// binary is started again to install it (a filter cannot be removed).
func TestApplySeccompRefuses(t *testing.T) {
	if os.Getenv("CODEEXEC_TEST_APPLY_SECCOMP") == "1" {
		seccompChild()
		return
	}
	t.Parallel()
	if err := seccompfilter.Available(); err != nil {
		t.Skipf("no seccomp filter on this host: %v", err)
	}
	out := runChild(t, "TestApplySeccompRefuses", "CODEEXEC_TEST_APPLY_SECCOMP")
	for _, want := range []string{"unshare(CLONE_NEWUSER): operation not permitted", "setns: operation not permitted",
		"keyctl: operation not permitted", "personality(ADDR_NO_RANDOMIZE): operation not permitted",
		"another thread's unshare(CLONE_NEWNET): operation not permitted", "getpid: allowed", "unshare(CLONE_FILES): allowed"} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("the filtered process did not say %q:\n%s", want, out.String())
		}
	}
}

func seccompChild() {
	runtime.LockOSThread()
	prog, err := seccompfilter.Program()
	if err == nil {
		err = applySeccomp(prog)
	}
	if err != nil {
		os.Stderr.WriteString("applySeccomp: " + err.Error() + "\n")
		os.Exit(3)
	}
	say := func(what string, err error) {
		if err == nil {
			os.Stdout.WriteString(what + ": allowed\n")
		} else {
			os.Stdout.WriteString(what + ": " + err.Error() + "\n")
		}
	}
	say("unshare(CLONE_NEWUSER)", unix.Unshare(unix.CLONE_NEWUSER))
	say("setns", unix.Setns(0, 0))
	_, err = unix.KeyctlInt(unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0, 0)
	say("keyctl", err)
	_, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, 0x0040000, 0, 0) // ADDR_NO_RANDOMIZE
	say("personality(ADDR_NO_RANDOMIZE)", errnoErr(e))
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // ends with this goroutine: its thread may be in a new namespace
		done <- unix.Unshare(unix.CLONE_NEWNET)
	}()
	say("another thread's unshare(CLONE_NEWNET)", <-done)
	say("getpid", errnoErr(0))
	say("unshare(CLONE_FILES)", unix.Unshare(unix.CLONE_FILES))
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func TestApplySeccompRefusesAMalformedFilter(t *testing.T) {
	t.Parallel()
	for _, f := range [][]byte{nil, make([]byte, 7)} {
		if err := applySeccomp(f); err == nil || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("applySeccomp(%d bytes) = %v, want the filter named malformed", len(f), err)
		}
	}
}

// TestApplySeccompFailsWhenAThreadCannotTakeIt: with TSYNC, a thread that
// cannot take the filter (it has one of its own that is not an ancestor of
// this thread's) makes the kernel return that thread's id, not an error,
// and install the filter nowhere; applySeccomp must fail then, never go on
// unfiltered. The test binary is started again (a filter stays).
func TestApplySeccompFailsWhenAThreadCannotTakeIt(t *testing.T) {
	if os.Getenv("CODEEXEC_TEST_SECCOMP_TSYNC") == "1" {
		tsyncChild()
		return
	}
	t.Parallel()
	if err := seccompfilter.Available(); err != nil {
		t.Skipf("no seccomp filter on this host: %v", err)
	}
	out := runChild(t, "TestApplySeccompFailsWhenAThreadCannotTakeIt", "CODEEXEC_TEST_SECCOMP_TSYNC")
	if want := "applySeccomp: seccomp(SECCOMP_SET_MODE_FILTER): thread "; !strings.Contains(out.String(), want) {
		t.Fatalf("the child said:\n%s\nwant %q... could not take the filter", out, want)
	}
}

func tsyncChild() {
	prog, err := seccompfilter.Program()
	if err != nil {
		os.Stdout.WriteString("filter: " + err.Error() + "\n")
		os.Exit(3)
	}
	ready, hold := make(chan error), make(chan struct{})
	go func() {
		// Another thread with a filter of its own, installed without
		// TSYNC: this thread's is not its ancestor.
		runtime.LockOSThread()
		ready <- installSeccomp(prog, 0)
		<-hold
	}()
	if err := <-ready; err != nil {
		os.Stdout.WriteString("the other thread's filter: " + err.Error() + "\n")
		os.Exit(3)
	}
	runtime.LockOSThread()
	if err := applySeccomp(prog); err != nil {
		os.Stdout.WriteString("applySeccomp: " + err.Error() + "\n")
	} else {
		os.Stdout.WriteString("applySeccomp: nil\n")
	}
	close(hold)
}

// runChild runs the test binary again for test alone, with env=1 (a filter
// cannot be removed from a process), and returns its output; it fails the
// test when the child fails.
func runChild(t *testing.T, test, env string) *bytes.Buffer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the child process: %v\n%s", err, out.String())
	}
	return &out
}
