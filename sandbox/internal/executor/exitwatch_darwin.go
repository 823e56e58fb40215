//go:build darwin

package executor

import "golang.org/x/sys/unix"

// watchExit calls f once process pid, a child of this process that is not
// yet waited for, has ended: before it is waited for, since waiting for a
// command also waits for its output to close, which a process it left
// holding its stdout keeps open (until exec.Cmd's WaitDelay). It watches
// the process with a kqueue, registered before anything can wait for it;
// where that fails it does nothing, and the run ends when its output
// closes, as before.
func watchExit(pid int, f func()) {
	kq, err := unix.Kqueue()
	if err != nil {
		return
	}
	ev := unix.Kevent_t{Ident: uint64(pid), Filter: unix.EVFILT_PROC, Flags: unix.EV_ADD | unix.EV_ONESHOT, Fflags: unix.NOTE_EXIT}
	if _, err := unix.Kevent(kq, []unix.Kevent_t{ev}, nil, nil); err != nil {
		unix.Close(kq)
		return
	}
	go func() {
		defer unix.Close(kq)
		got := make([]unix.Kevent_t, 1)
		for {
			n, err := unix.Kevent(kq, nil, got, nil)
			if err == unix.EINTR {
				continue
			}
			if err == nil && n > 0 {
				f()
			}
			return
		}
	}()
}
