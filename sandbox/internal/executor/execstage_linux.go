//go:build linux

package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execMain is the exec stage: it reads the Spec on fd 3, applies the limits,
// the user and no-new-privileges to itself, and execs the interpreter. On
// failure it writes one line to stderr and exits 126, like a shell.
func execMain() int {
	runtime.LockOSThread()
	// No garbage collection from here on: this process lives a few
	// milliseconds and allocates far less than a collection's first
	// trigger, and one running beside the last steps would fail under the
	// memory limits (execWithLimits).
	debug.SetGCPercent(-1)
	cfg := os.NewFile(3, "spec")
	var spec Spec
	if err := json.NewDecoder(cfg).Decode(&spec); err != nil {
		return execFail("reading the run spec", err)
	}
	_ = cfg.Close()
	// The supervisor moved this process into the run's cgroups before it
	// sent the Spec: everything the program starts is counted there. It
	// started this process before the run's root and directory were ready.
	if err := os.Chdir(spec.Dir); err != nil {
		return execFail("changing into the run directory", err)
	}
	_ = CloseInheritedOnExec()
	argv := append([]string{spec.Path}, spec.Args...)
	if c := spec.Credential; c != nil {
		if err := syscall.Setgroups([]int{int(c.GID)}); err != nil {
			return execFail("dropping supplementary groups", err)
		}
		if err := syscall.Setgid(int(c.GID)); err != nil {
			return execFail("switching group", err)
		}
		if err := syscall.Setuid(int(c.UID)); err != nil {
			return execFail("switching user", err)
		}
	}
	if spec.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return execFail("setting no-new-privileges", err)
		}
	}
	// A session keyring of its own: the server's (and every other run's)
	// keys are out of reach, whatever the seccomp filter does.
	if _, err := unix.KeyctlInt(unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0, 0); err != nil && !errors.Is(err, unix.ENOSYS) {
		return execFail("joining a new session keyring", err)
	}
	if err := lockDown(spec); err != nil {
		return execFail("isolating the program", err)
	}
	if spec.Isolation.Seccomp {
		if err := applySeccomp(spec.Isolation.SeccompFilter); err != nil {
			return execFail("applying the seccomp filter", err)
		}
	}
	return execWithLimits(spec, argv)
}

// execWithLimits sets the rlimits and execs the interpreter. Once the memory
// limits are in force this Go process must not allocate (the Go and race
// runtimes would fail), so everything execve needs is prepared first and the
// last steps are raw system calls.
func execWithLimits(spec Spec, argv []string) int {
	path, err := syscall.BytePtrFromString(spec.Path)
	if err != nil {
		return execFail("starting "+spec.Path, err)
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return execFail("starting "+spec.Path, err)
	}
	envp, err := syscall.SlicePtrFromStrings(spec.Env)
	if err != nil {
		return execFail("starting "+spec.Path, err)
	}
	var ls []rlimit
	if spec.Rlimits {
		ls = rlimitsFor(spec)
	}
	// Nor may the runtime's own threads: a garbage collection running
	// beside the last steps allocates (its span queues), and under the
	// memory limits it fails ("runtime: cannot allocate memory", seen in
	// the containment suite under load). execMain, the only caller, turned
	// the collector off as it began (SetGCPercent waits for a cycle in
	// progress to end its marking); if a cycle ran before that, a last
	// one, sweep included, is finished here. Otherwise there is nothing to
	// sweep, and forcing a cycle costs about 0.3 ms of CPU in every run.
	var m runtime.MemStats
	if runtime.ReadMemStats(&m); m.NumGC > 0 {
		runtime.GC()
	}
	switch i, e := lastSteps(ls, spec.Preload != nil, path, &argvp[0], &envp[0]); {
	case i < len(ls):
		return execFail("setting "+ls[i].name, e)
	case i == len(ls):
		return execFail("keeping the interpreter's socket", e)
	default:
		return execFail("starting "+spec.Path, e)
	}
}

// lastSteps sets the rlimits ls and execs path; it returns only if a step
// failed: the index in ls of the limit that could not be set, len(ls) if
// the interpreter's socket could not be kept (dup3 of preloadFD to 3, when
// keepSocket), len(ls)+1 if execve failed.
//
// Nothing between the first limit and the execve may preempt this
// goroutine. A preemption, at a function's stack check or by signal,
// reschedules it, and the goroutine of a helper's init is locked to its
// thread: the runtime hands the P to another thread, starting one if none
// idles (a clone that RLIMIT_NPROC may refuse: "pthread_create failed:
// Resource temporarily unavailable"), and a preemption by signal saves the
// registers in memory it allocates (which the memory limits refuse:
// "runtime: cannot allocate memory"). Both were seen in CI, as an ordinary
// user under load. So this function and all it calls are go:nosplit
// (no stack check, and never preempted by signal), go:norace (the race
// runtime allocates shadow memory) and, lest its body become part of a
// preemptible caller, go:noinline; it calls only raw system calls.
// TestLastStepsCannotBePreempted checks the compiled code.
//
//go:nosplit
//go:norace
//go:noinline
func lastSteps(ls []rlimit, keepSocket bool, path *byte, argv, envp **byte) (int, syscall.Errno) {
	for i := range ls {
		if _, _, e := syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, uintptr(ls[i].res), uintptr(unsafe.Pointer(&ls[i].lim)), 0, 0, 0); e != 0 {
			return i, e
		}
	}
	// No descriptor but stdio survives the exec (and, for an interpreter
	// started ahead, its socket as fd 3, which its bootstrap closes before
	// the program runs), and the program starts with every signal at its
	// default, none blocked.
	closeFromRaw(3)
	if keepSocket {
		if _, _, e := syscall.RawSyscall(unix.SYS_DUP3, preloadFD, 3, 0); e != 0 {
			return len(ls), e
		}
	}
	resetSignalsRaw()
	_, _, e := syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(argv)), uintptr(unsafe.Pointer(envp)))
	return len(ls) + 1, e
}

func execFail(what string, err error) int {
	fmt.Fprintf(os.Stderr, "codeexec: %s: %v\n", what, err)
	return 126
}

// rlimit is one kernel resource limit to set.
type rlimit struct {
	name string
	res  int
	lim  unix.Rlimit
}

// rlimitsFor derives the run's kernel limits from its Spec, memory last.
func rlimitsFor(spec Spec) []rlimit {
	l := spec.Limits
	var ls []rlimit
	add := func(name string, res int, cur, max uint64) {
		ls = append(ls, rlimit{name, res, unix.Rlimit{Cur: cur, Max: max}})
	}
	if l.Processes > 0 {
		// RLIMIT_NPROC counts every process of the user, not only this
		// run's: allow the user's existing processes plus the run's share.
		// This stage's own threads are counted as existing ones: until the
		// execve the Go runtime may start another, which must not fail.
		// Never above the hard limit that the server has: it could not
		// raise it.
		n := uint64(countUserProcesses(os.Getuid()) + l.Processes)
		var have unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NPROC, &have) == nil && have.Max < n {
			n = have.Max
		}
		add("RLIMIT_NPROC", unix.RLIMIT_NPROC, n, n)
	}
	if l.Timeout > 0 {
		secs := uint64(max(1, l.CPUs)*l.Timeout.Seconds()) + 1
		// The soft limit sends SIGXCPU, the hard one SIGKILL a second later.
		add("RLIMIT_CPU", unix.RLIMIT_CPU, secs, secs+1)
	}
	if l.OpenFiles > 0 {
		add("RLIMIT_NOFILE", unix.RLIMIT_NOFILE, uint64(l.OpenFiles), uint64(l.OpenFiles))
	}
	if l.FileSizeBytes > 0 {
		add("RLIMIT_FSIZE", unix.RLIMIT_FSIZE, uint64(l.FileSizeBytes), uint64(l.FileSizeBytes))
	}
	add("RLIMIT_CORE", unix.RLIMIT_CORE, 0, 0)
	if l.MemoryBytes > 0 {
		add("RLIMIT_DATA", unix.RLIMIT_DATA, uint64(l.MemoryBytes), uint64(l.MemoryBytes))
		if !spec.NoAddressSpaceLimit {
			as := uint64(l.MemoryBytes + spec.AddressSpaceExtra)
			add("RLIMIT_AS", unix.RLIMIT_AS, as, as)
		}
	}
	return ls
}

// countUserProcesses counts the threads owned by uid (RLIMIT_NPROC counts
// threads).
func countUserProcesses(uid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) != nil || int(st.Uid) != uid {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				t, _ := strconv.Atoi(strings.TrimSpace(v))
				n += t
			}
		}
	}
	return n
}
