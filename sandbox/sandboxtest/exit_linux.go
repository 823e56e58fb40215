package sandboxtest

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// WaitExited waits until process pid has exited (a zombie nobody has
// waited for yet counts as exited), for at most d, which only bounds a
// hang: it polls the process's pidfd, which the kernel makes readable when
// the process exits, so it wakes on the exit itself, not on a clock. A pid
// that is already gone has exited.
func WaitExited(pid int, d time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(d)
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return errors.New("the process did not exit within " + d.String())
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return err
		case n > 0:
			return nil
		}
	}
}
