//go:build unix && !linux

package executor

import (
	"os"
	"strconv"
	"syscall"
)

// CloseInheritedOnExec marks every descriptor of this process above stdio
// close-on-exec, so that none reaches a program it starts (see the Linux
// version). It reads the open descriptors from /dev/fd.
func CloseInheritedOnExec() error {
	entries, err := os.ReadDir("/dev/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if fd, perr := strconv.Atoi(e.Name()); perr == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}
