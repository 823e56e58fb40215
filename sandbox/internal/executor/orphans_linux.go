//go:build linux

package executor

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/codeexec/codeexec/sandbox/internal/procfs"
)

// Mode none starts programs directly from the server (no supervisor, so a
// run costs one process start less). To keep the promise that no process
// outlives its run, the server becomes a child subreaper: a daemon, a
// double fork or a setsid escape of a run is re-parented to the server, and
// at the end of the run the sweep below kills every such orphan that carries
// the run's marker in its environment, with its descendants. (In mode none a
// program that also clears its environment can evade the sweep until the
// server exits; mode none promises no isolation.)

func directAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// EnableOrphanReaping makes the server a child subreaper, so that the
// orphans of direct runs come back to it to be swept.
func EnableOrphanReaping() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// sweepOrphans kills the orphans re-parented to the server that carry marker
// in their environment, and their descendants, and reaps the server's
// zombie children that no exec.Cmd waits for.
func sweepOrphans(marker string) {
	// One sweep at a time (each run in flight sweeps when its program
	// ends): a victim that one sweep reaps could otherwise be waited for by
	// another after its pid went to a new child.
	sweeping.Lock()
	defer sweeping.Unlock()
	self := os.Getpid()
	for round := 0; round < 1000; round++ {
		procs := procTable()
		children.Lock()
		var victims []int
		for pid, p := range procs {
			if p.ppid != self || children.pids[pid] {
				continue
			}
			if p.zombie {
				reapPid(pid)
				continue
			}
			if marker != "" && hasEnv(pid, marker) {
				victims = append(victims, pid)
				victims = append(victims, subtree(procs, pid)...)
			}
		}
		children.Unlock()
		if len(victims) == 0 {
			return
		}
		for _, pid := range victims {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range victims {
			if procs[pid].ppid == self {
				reapPid(pid)
			}
		}
	}
}

func reapPid(pid int) {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			return
		}
	}
}

// sweeping serializes sweepOrphans.
var sweeping sync.Mutex

// hasEnv reports whether the environment of pid holds the KEY=value pair kv
// (read through a live thread: the first one's reads empty once it has
// ended).
func hasEnv(pid int, kv string) bool {
	dir := procfs.LiveTask("/proc/" + strconv.Itoa(pid))
	if dir == "" {
		return false
	}
	b, err := os.ReadFile(dir + "/environ")
	if err != nil {
		return false
	}
	for _, v := range bytes.Split(b, []byte{0}) {
		if string(v) == kv {
			return true
		}
	}
	return false
}
