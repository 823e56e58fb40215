//go:build linux

package executor

import (
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// CloseInheritedOnExec marks every descriptor of this process above stdio
// close-on-exec, so that none reaches a program it starts: a descriptor the
// server inherited without close-on-exec (`( exec 9<dir; codeexec )`) would
// otherwise be open in every run, and through a directory descriptor a
// program can open host files even from inside a mount namespace. The Go
// runtime opens its own descriptors close-on-exec, so this changes nothing
// for the server itself. The server calls it at start; mode none calls it
// before each run, and the supervisor and the exec stage call it too. Safe
// to call any number of times, from any goroutine.
func CloseInheritedOnExec() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Before Linux 5.11: one descriptor at a time.
	entries, rerr := os.ReadDir("/proc/self/fd")
	if rerr != nil {
		return err
	}
	for _, e := range entries {
		if fd, perr := strconv.Atoi(e.Name()); perr == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// closeFromRaw marks every descriptor from first upwards close-on-exec
// without allocating, for the exec stage's last steps before execve. It
// reports whether the kernel did it (Linux 5.11 and later). Not
// preemptible, for lastSteps.
//
//go:nosplit
//go:norace
func closeFromRaw(first int) bool {
	_, _, e := syscall.RawSyscall(unix.SYS_CLOSE_RANGE, uintptr(first), ^uintptr(0), unix.CLOSE_RANGE_CLOEXEC)
	return e == 0
}
