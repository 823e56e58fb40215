package executor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// jobHelperVar makes this test binary a program of the tests below: the
// role its value names.
const jobHelperVar = "CODE_EXEC_TEST_JOB_HELPER"

func init() {
	if role := os.Getenv(jobHelperVar); role != "" {
		os.Exit(jobHelper(role))
	}
}

// jobHelper plays a role: "sleep" forever; "tree" starts a sleeper and
// prints its pid ("tree-wait" then sleeps too); "breakaway" tries to start
// a process out of its job; "procs" starts sleepers until it cannot (at
// most 5) and prints how many it started; "alloc" commits 256 MiB.
func jobHelper(role string) int {
	self, _ := os.Executable()
	sleeper := func(flags uint32) (*exec.Cmd, error) {
		c := exec.Command(self)
		c.Env = append(os.Environ(), jobHelperVar+"=sleep")
		c.SysProcAttr = &syscall.SysProcAttr{CreationFlags: flags}
		return c, c.Start()
	}
	switch role {
	case "sleep":
		time.Sleep(time.Hour)
	case "tree", "tree-wait":
		c, err := sleeper(windows.CREATE_NEW_PROCESS_GROUP | windows.DETACHED_PROCESS)
		if err != nil {
			fmt.Println("start:", err)
			return 1
		}
		fmt.Println(c.Process.Pid)
		if role == "tree-wait" {
			time.Sleep(time.Hour)
		}
	case "breakaway":
		if _, err := sleeper(windows.CREATE_BREAKAWAY_FROM_JOB); err != nil {
			fmt.Println("refused:", err)
			return 0
		}
		fmt.Println("escaped")
	case "procs":
		n := 0
		for ; n < 5; n++ {
			if _, err := sleeper(0); err != nil {
				break
			}
		}
		fmt.Println(n)
	case "alloc":
		b := make([]byte, 256<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("allocated")
	}
	return 0
}

// runHelper runs this binary in role under the run core, with limits lim
// (Rlimits when rlimits), and returns the result.
func runHelper(t *testing.T, ctx context.Context, role string, lim sandbox.Limits, rlimits bool, observe sandbox.ObserveFunc) (*sandbox.Result, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if lim.Timeout == 0 {
		lim.Timeout = 5 * time.Minute
	}
	lim.OutputBytes = 1 << 20
	res := &sandbox.Result{}
	env := []string{jobHelperVar + "=" + role, "SystemRoot=" + os.Getenv("SystemRoot")}
	err = executor.Spawn(ctx, executor.Spec{Path: self, Env: env, Dir: t.TempDir(), Limits: lim, Rlimits: rlimits, Observe: observe}, res)
	return res, err
}

// waitGone waits until process pid has ended (a test timeout, not a wall
// clock, bounds it) and returns its exit code, or -1 when it was already
// gone.
func waitGone(t *testing.T, pid int) int {
	t.Helper()
	h, err := windows.OpenProcess(windows.SYNCHRONIZE|windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return -1
	}
	defer windows.CloseHandle(h)
	if _, err := windows.WaitForSingleObject(h, windows.INFINITE); err != nil {
		t.Fatal(err)
	}
	var code uint32
	if err := windows.GetExitCodeProcess(h, &code); err != nil {
		t.Fatal(err)
	}
	return int(code)
}

// A process that the program leaves running, detached from it, dies when
// the program ends: the run's job is terminated.
func TestJobEndsWhatTheProgramLeaves(t *testing.T) {
	res, err := runHelper(t, context.Background(), "tree", sandbox.Limits{}, false, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if code := waitGone(t, pid); code == 259 { // STILL_ACTIVE
		t.Fatalf("the detached child %d is still running", pid)
	}
}

// Cancelling a run kills the program and every process it started, and
// the result says it was killed.
func TestJobStopEndsTheRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pids := make(chan int, 1)
	observe := func(stream sandbox.Stream, p []byte) {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(p))); err == nil && stream == sandbox.Stdout {
			select {
			case pids <- pid:
			default:
			}
			cancel()
		}
	}
	_, err := runHelper(t, ctx, "tree-wait", sandbox.Limits{}, true, observe)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Spawn: %v, want cancelled", err)
	}
	select {
	case pid := <-pids:
		waitGone(t, pid)
	default:
		t.Fatal("the program printed no pid")
	}
}

// A timeout kills the run: the result says timed out and killed.
func TestJobTimeout(t *testing.T) {
	res, err := runHelper(t, context.Background(), "sleep", sandbox.Limits{Timeout: time.Second}, true, nil)
	if err != nil || !res.TimedOut || res.Signal != "killed" || res.ExitCode != 137 {
		t.Fatalf("%v %+v", err, res)
	}
}

// No process of a run can leave its job.
func TestJobRefusesBreakaway(t *testing.T) {
	res, err := runHelper(t, context.Background(), "breakaway", sandbox.Limits{}, true, nil)
	if err != nil || !strings.HasPrefix(res.Stdout, "refused:") {
		t.Fatalf("%v stdout %q stderr %q", err, res.Stdout, res.Stderr)
	}
}

// skipUnderWine skips a test of what Wine does not implement.
func skipUnderWine(t *testing.T, what string) {
	t.Helper()
	if windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil {
		t.Skipf("Wine does not enforce %s (this test runs on real Windows only)", what)
	}
}

// The process limit counts every process of the run, alive at once.
func TestJobCapsProcesses(t *testing.T) {
	skipUnderWine(t, "a job's ActiveProcessLimit")
	res, err := runHelper(t, context.Background(), "procs", sandbox.Limits{Processes: 3}, true, nil)
	if err != nil || strings.TrimSpace(res.Stdout) != "2" {
		t.Fatalf("%v stdout %q (want 2 children beside the program) stderr %q", err, res.Stdout, res.Stderr)
	}
}

// The memory limit bounds what the run commits.
func TestJobCapsMemory(t *testing.T) {
	skipUnderWine(t, "a job's JobMemoryLimit")
	res, err := runHelper(t, context.Background(), "alloc", sandbox.Limits{MemoryBytes: 64 << 20}, true, nil)
	if err != nil || res.ExitCode == 0 || strings.Contains(res.Stdout, "allocated") {
		t.Fatalf("%v exit %d stdout %q stderr %.300q", err, res.ExitCode, res.Stdout, res.Stderr)
	}
}
