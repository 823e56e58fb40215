//go:build unix

package executor

import (
	"errors"
	"os"
	"syscall"
)

// TryLock takes an exclusive lock on f (flock) without waiting: it fails
// with ErrLocked when another open file holds one. The lock lasts until f
// is closed.
func TryLock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
