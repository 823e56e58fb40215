//go:build linux

package executor

import "golang.org/x/sys/unix"

// watchExit calls f once process pid, a child of this process that is not
// yet waited for, has ended: before it is waited for, since waiting for a
// command also waits for its output to close, which a process it left
// holding its stdout keeps open (until exec.Cmd's WaitDelay). It watches a
// pidfd, so a pid used again after the wait is never taken for it; without
// pidfds (Linux before 5.3) it does nothing, and the run ends when its
// output closes, as before.
func watchExit(pid int, f func()) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	go func() {
		defer unix.Close(fd)
		var info unix.Siginfo
		for {
			// WNOWAIT: the process stays for exec.Cmd to wait for.
			err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err == unix.EINTR {
				continue
			}
			// ECHILD: exec.Cmd has waited for it already (this pidfd is
			// that process's, whatever its pid is now).
			if err == nil || err == unix.ECHILD {
				f()
			}
			return
		}
	}()
}
