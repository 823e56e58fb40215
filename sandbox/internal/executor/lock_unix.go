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

// TryLockShared takes a shared lock on f (flock) without waiting: other
// shared locks may be held with it, and it fails with ErrLocked while an
// exclusive one is. The lock lasts until f is closed.
func TryLockShared(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
