//go:build linux

package executor

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// A prepared run (see Prepare) waits, and its interpreter loads, at the
// lowest CPU priority, preparingNice: a client that calls again as soon as
// it has its answer then gets the CPU for its run first, and the
// preparations take what is left, instead of slowing every run being
// served. At the hand-over every thread of the run goes back to the
// server's own priority, before the run's program gets its request.
//
// Only a server that may raise a priority again does this (CAP_SYS_NICE,
// as root, or an RLIMIT_NICE that allows it, for processes of its own
// user): otherwise prepared runs keep the server's priority throughout, as
// before. lowPriority says which.

// preparingNice is the nice value of a prepared run until its hand-over.
const preparingNice = 19

// lowPriority reports whether prepared runs wait at preparingNice, and the
// nice value they get back at the hand-over (the server's).
var lowPriority = sync.OnceValues(probeLowPriority)

// PreparesAtLowPriority reports whether prepared runs wait, and their
// interpreters load, at the lowest CPU priority on this host, and the nice
// value that their runs then get back (the server's own).
func PreparesAtLowPriority() (bool, int) { return lowPriority() }

func probeLowPriority() (bool, int) {
	self, err := threadNice(unix.Gettid())
	if err != nil || self >= preparingNice {
		return false, self
	}
	// The children's file lists a thread's children: the hand-over finds
	// the run's processes with it.
	if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/children"); err != nil {
		return false, self
	}
	// Lower a thread of this process and raise it back: what the hand-over
	// does, where the kernel decides (capabilities in the initial user
	// namespace, RLIMIT_NICE). The thread is not used again (a goroutine
	// that ends locked to its thread ends the thread), whatever happened.
	ok := make(chan bool)
	go func() {
		runtime.LockOSThread()
		tid := unix.Gettid()
		if syscall.Setpriority(syscall.PRIO_PROCESS, tid, preparingNice) != nil {
			ok <- false
			return
		}
		ok <- syscall.Setpriority(syscall.PRIO_PROCESS, tid, self) == nil
	}()
	return <-ok, self
}

// threadNice returns the nice value of thread tid (getpriority's raw
// value is 20 minus it).
func threadNice(tid int) (int, error) {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return 0, err
	}
	return 20 - p, nil
}

// lowerPriority sets every thread of a prepared run's supervisor, pid, to
// preparingNice, when the server may raise it again. The supervisor has
// not started anything yet: what it starts later inherits the value
// (threads that its runtime starts while the walk goes on are found by the
// next walk). Only a run whose interpreter starts ahead is lowered: its
// loading is the work worth putting last, and its end (it has loaded)
// is a point where nothing of it creates threads, where the hand-over can
// restore every one (Prepared.beginWhenLoaded). A supervisor alone has no
// such point that the server sees.
func lowerPriority(pid int) {
	if on, _ := lowPriority(); on {
		walkUntilSet(pid, preparingNice)
	}
}

// restorePriority gives every thread of the run under pid (its supervisor
// and their descendants) the server's nice value back; the hand-over calls
// it before the program gets its request. A thread that a thread not yet
// restored starts meanwhile inherits the low value: the walk is repeated
// until it finds none. A thread still being created when the last walk
// lists the threads is not found: the hand-over calls it where nothing of
// the run creates threads (the interpreter has loaded), and walks by
// earlier only to let the loading go on at the server's priority
// (restoreEarly; Prepared.beginWhenLoaded).
func restorePriority(pid int) {
	if on, nice := lowPriority(); on {
		walkUntilSet(pid, nice)
	}
}

// restoreEarly is restorePriority while the run's interpreter is still
// loading.
func restoreEarly(pid int) {
	if f := earlyRestoreForTest.Load(); f != nil {
		(*f)(pid)
		return
	}
	restorePriority(pid)
}

// earlyRestoreForTest, set by a test, replaces restoreEarly's walk.
var earlyRestoreForTest atomic.Pointer[func(pid int)]

// walkUntilSet sets the nice value of the threads under pid (see
// setTreeNice) until a walk finds none to change, 8 walks at most.
func walkUntilSet(pid, nice int) {
	for range 8 {
		if setTreeNice(pid, nice) == 0 {
			return
		}
	}
}

// setTreeNice sets the nice value of every thread of pid and of its
// descendants (a process that is gone meanwhile is skipped), and returns
// how many it changed. It follows the children files from pid down, not
// procTable and subtree: the hand-over reads the run's few tasks, not every
// process of the host.
func setTreeNice(pid, nice int) int {
	changed := 0
	seen := map[int]bool{}
	todo := []int{pid}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[p] {
			continue
		}
		seen[p] = true
		dir := "/proc/" + strconv.Itoa(p) + "/task/"
		tasks, _ := os.ReadDir(dir)
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if n, err := threadNice(tid); err == nil && n != nice &&
				syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice) == nil {
				changed++
			}
			b, _ := os.ReadFile(dir + t.Name() + "/children")
			for _, c := range strings.Fields(string(b)) {
				if child, err := strconv.Atoi(c); err == nil {
					todo = append(todo, child)
				}
			}
		}
	}
	return changed
}
