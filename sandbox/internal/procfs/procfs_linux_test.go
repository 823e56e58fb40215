package procfs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/internal/procfs"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestFirstThreadEnded: a process whose first thread has ended looks like a
// zombie in its own stat, and is alive through its other thread until it
// is killed.
func TestFirstThreadEnded(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	marker := "procfs-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command(python, "-c", sandboxtest.FirstThreadExits, marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	dir := "/proc/" + strconv.Itoa(cmd.Process.Pid)
	if got := procfs.LiveTask(dir); got != dir {
		t.Fatalf("LiveTask of a running process = %q, want %q", got, dir)
	}
	deadline := time.Now().Add(time.Minute) // bounds a hang only
	for !procfs.TaskEnded(dir) {
		if time.Now().After(deadline) {
			t.Fatal("the first thread did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	live := procfs.LiveTask(dir)
	if live == "" || live == dir {
		t.Fatalf("LiveTask = %q, want another thread of the process", live)
	}
	if b, _ := os.ReadFile(filepath.Join(live, "cmdline")); !strings.Contains(string(b), marker) {
		t.Errorf("the live thread's cmdline %q lacks the marker", b)
	}
	_ = cmd.Process.Kill()
	<-exited
	if got := procfs.LiveTask(dir); got != "" {
		t.Errorf("LiveTask of a reaped process = %q, want \"\"", got)
	}
	if !procfs.TaskEnded(dir) {
		t.Error("TaskEnded of a reaped process is false")
	}
}
