//go:build linux

package executor

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The supervisor must survive every signal a program can send it: in a PID
// namespace it is the program's pid 1, and without one it is the program's
// parent (which, in a user namespace, the program may signal). The program,
// on the other hand, must start with every disposition at its default, as a
// program started by a shell or in a fresh container does.

// sigaction is the kernel's struct sigaction (x86-64, arm64 and the other
// architectures whose rt_sigaction takes this layout).
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const (
	sigDFL = 0
	sigIGN = 1
	nsig   = 64
)

// sigSetStackOnly are the signals that the Go runtime leaves alone (it only
// adjusts a handler that C code installed): os/signal cannot ignore them, so
// they are set to SIG_IGN directly.
var sigSetStackOnly = []syscall.Signal{32, 33, 34}

// keptSignals are left to the Go runtime: their default is to do nothing,
// and the runtime needs them (SIGCHLD for waiting on children, SIGURG for
// preemption, SIGPROF for profiling).
var keptSignals = []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF, syscall.SIGCONT, syscall.SIGWINCH}

// ignoreAllSignals makes this process deaf to every signal that another
// process sends it, SIGKILL and SIGSTOP aside (which a PID namespace's init
// does not receive from inside its namespace anyway). Faults of this process
// itself (a real SIGSEGV) still crash it, as they should.
func ignoreAllSignals() {
	var sigs []os.Signal
	for s := syscall.Signal(1); s <= nsig; s++ {
		if containsSignal(keptSignals, s) {
			continue
		}
		if containsSignal(sigSetStackOnly, s) {
			act := sigaction{handler: sigIGN}
			_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(s), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
			continue
		}
		sigs = append(sigs, s)
	}
	signal.Ignore(sigs...)
}

func containsSignal(list []syscall.Signal, s syscall.Signal) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// resetSignalsRaw sets every ignored signal back to its default and
// unblocks every signal, without allocating: the exec stage's last step
// before execve (which resets the handled signals itself, but keeps the
// ignored ones and the mask), and so, like lastSteps, not preemptible.
//
//go:nosplit
//go:norace
func resetSignalsRaw() {
	for s := uintptr(1); s <= nsig; s++ {
		if s == uintptr(syscall.SIGKILL) || s == uintptr(syscall.SIGSTOP) {
			continue
		}
		var old sigaction
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, s, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			continue
		}
		if old.handler == sigIGN {
			act := sigaction{handler: sigDFL}
			_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, s, uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
		}
	}
	var none uint64
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&none)), 0, 8, 0, 0)
}
