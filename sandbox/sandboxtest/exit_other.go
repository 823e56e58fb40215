//go:build !linux

package sandboxtest

import (
	"errors"
	"time"
)

// WaitExited waits until process pid has exited; it needs Linux's pidfd.
func WaitExited(pid int, d time.Duration) error {
	return errors.New("waiting for another process's exit needs Linux")
}
