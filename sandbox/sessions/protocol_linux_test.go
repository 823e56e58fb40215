package sessions

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An interpreter that cannot start within the process limit ends the
// session's start at once, naming the limit. node, refused one of its
// threads as it starts, waits for it forever: where a session's processes
// share their host user with others (process mode without a user namespace
// or a user of its own), RLIMIT_NPROC counts those too, and the session's
// headroom shrinks as they start more, until a reset after a timeout cannot
// start node again. Here the supervisor runs as a host user of its own, whose
// processes nothing else changes, with room for itself and two more threads.
// Seen failing without the supervisor's check: no answer within the minute.
func TestInterpreterAtTheProcessLimit(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the supervisor runs as a host user of its own, since RLIMIT_NPROC counts every process of its user")
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skipf("prlimit (util-linux) is not installed: %v", err)
	}
	const uid = 3999999 // no process of the host's has it
	c := launchDriver(t, "javascript", func(cmd *exec.Cmd) {
		// An interpreter the user can reach (not a shim under root's home).
		if _, err := os.Stat("/usr/bin/python3"); err == nil {
			cmd.Args[0] = "/usr/bin/python3"
		}
		cmd.Args = append([]string{prlimit, "--nproc=3", "--"}, cmd.Args...)
		cmd.Path = prlimit
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		for _, d := range []string{filepath.Dir(cmd.Dir), cmd.Dir} {
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
		}
	})
	// Before the supervisor is waited for: one that does not give up
	// waits for node, and node for its thread, forever.
	t.Cleanup(func() { killUser(uid) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ready, err := c.WaitReady(ctx)
	if err == nil || !strings.Contains(err.Error(), "the process limit is reached") {
		t.Fatalf("a javascript supervisor with room for 3 threads: ready %q, %v; want the process limit named", ready, err)
	}
}

// killUser kills every process of host user uid, until none is left but
// zombies (which their parents reap).
func killUser(uid int) {
	for {
		found := false
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat("/proc/"+e.Name(), &st) != nil || int(st.Uid) != uid {
				continue
			}
			if b, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err != nil || zombie(b) {
				continue
			}
			found = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !found {
			return
		}
		runtime.Gosched()
	}
}

// zombie says whether stat, a /proc/PID/stat, is a zombie's.
func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X'
}
