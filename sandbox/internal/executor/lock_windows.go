//go:build windows

package executor

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// TryLock takes an exclusive lock on f (LockFileEx on its first byte)
// without waiting: it fails with ErrLocked when another open file holds
// one. The lock lasts until f is closed.
func TryLock(f *os.File) error {
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &windows.Overlapped{})
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return ErrLocked
	}
	return err
}

// TryLockShared takes a shared lock on f (LockFileEx on its first byte)
// without waiting: other shared locks may be held with it, and it fails
// with ErrLocked while an exclusive one is. The lock lasts until f is
// closed.
func TryLockShared(f *os.File) error {
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &windows.Overlapped{})
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return ErrLocked
	}
	return err
}
