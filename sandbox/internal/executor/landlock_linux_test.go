//go:build linux

package executor

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestRestrictThreadHoldsAfterExec: restrictThread restricts the thread
// that execs, and the program it execs keeps the domain: it writes in the
// directory a rule grants, and nowhere else, though it may read everything.
// The test binary is started again as the exec stage would be: locked to one
// thread among the Go runtime's others, it restricts that thread and execs a
// shell.
func TestRestrictThreadHoldsAfterExec(t *testing.T) {
	if dirs := os.Getenv("CODEEXEC_TEST_RESTRICT_THREAD"); dirs != "" {
		restrictedShell(strings.Split(dirs, "\n"))
		return
	}
	t.Parallel()
	if abi, err := LandlockABI(); err != nil || abi < 1 {
		if os.Getenv("CODE_EXEC_REQUIRE_ISOLATION") == "1" {
			t.Fatalf("the kernel has no Landlock (ABI %d, %v)", abi, err)
		}
		t.Skipf("the kernel has no Landlock (ABI %d, %v)", abi, err)
	}
	allowed, denied := t.TempDir(), t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestrictThreadHoldsAfterExec$")
	cmd.Env = append(os.Environ(), "CODEEXEC_TEST_RESTRICT_THREAD="+allowed+"\n"+denied)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the restricted shell: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"wrote allowed", "read /etc/passwd", "wrote /dev/null", "refused denied", "refused /tmp"} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the restricted shell did not say %q:\n%s", want, got)
		}
	}
	if _, err := os.Stat(filepath.Join(allowed, "f")); err != nil {
		t.Errorf("the file the rule allows was not written: %v", err)
	}
	if _, err := os.Stat(filepath.Join(denied, "f")); err == nil {
		t.Errorf("a file was written where no rule allows it")
	}
}

// restrictedShell is the exec stage of TestRestrictThreadHoldsAfterExec:
// it restricts this thread to reading everything and writing in
// dirs[0], and execs a shell that tries dirs[0], dirs[1] and /tmp.
func restrictedShell(dirs []string) {
	runtime.LockOSThread()
	// Threads of the runtime beside this one, which the domain does not
	// cover and the exec ends.
	done := make(chan bool)
	for range 4 {
		go func() { done <- true }()
	}
	for range 4 {
		<-done
	}
	err := restrictThread([]llRule{
		{llAccessRead, []string{"/"}},
		{llAccessRead | llAccessWrite, []string{dirs[0]}},
		{(llAccessRead | llAccessWrite) & llAccessFile, []string{"/dev/null"}},
	})
	if err != nil {
		os.Stderr.WriteString("restrictThread: " + err.Error() + "\n")
		os.Exit(3)
	}
	script := `try() { if eval "$2" 2>/dev/null; then echo "$1"; else echo "refused ${1#* }"; fi; }
try "wrote allowed" 'echo x > "$A/f"'
try "read /etc/passwd" 'cat /etc/passwd >/dev/null'
try "wrote /dev/null" 'echo x > /dev/null'
try "wrote denied" 'echo x > "$D/f"'
try "wrote /tmp" 'echo x > /tmp/codeexec-restrict-thread-$$'
rm -f /tmp/codeexec-restrict-thread-$$
`
	env := append(os.Environ(), "A="+dirs[0], "D="+dirs[1])
	err = syscall.Exec("/bin/sh", []string{"sh", "-c", script}, env)
	os.Stderr.WriteString("exec: " + err.Error() + "\n")
	os.Exit(3)
}
