//go:build linux

package executor

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock, applied to the one thread that execs the program.
//
// A Landlock domain belongs to a thread, and execve keeps the calling
// thread's domain for the new program and ends every other thread. The exec
// stage runs on one locked OS thread up to its execve (execMain), so
// restricting that thread is what the program needs, and all it gets is
// that thread's domain. Restricting every thread of the Go process, as a
// library for long-lived programs does, costs a signal to each thread and a
// wait for all of them (libcap's psx with cgo, about 3 ms of a prepared run
// on two loaded CPUs), and protects nothing more here: the other threads
// run none of the program's code and vanish at the execve.

// The access rights this code handles, by Landlock ABI version: every file
// system right up to ABI 5 (IOCTL_DEV). REFER is handled and never granted,
// so no file is linked or moved to another directory; same-directory renames
// stay possible.
const (
	llAccessRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR

	llAccessWrite = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM | unix.LANDLOCK_ACCESS_FS_TRUNCATE

	// The rights that apply to a file that is not a directory.
	llAccessFile = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_READ_FILE

	// ABI 1's rights: every one from EXECUTE to MAKE_SYM.
	llAccessV1 = unix.LANDLOCK_ACCESS_FS_MAKE_SYM<<1 - 1
)

// llHandled returns the rights handled on a kernel of Landlock ABI abi:
// those that kernel knows of.
func llHandled(abi int) uint64 {
	h := uint64(llAccessV1)
	if abi >= 2 {
		h |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		h |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		h |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return h
}

// llRule grants access (a set of LANDLOCK_ACCESS_FS_ rights) beneath each
// of paths; paths that do not exist are left out.
type llRule struct {
	access uint64
	paths  []string
}

// LandlockABI returns the Landlock ABI version of this kernel (0: none).
func LandlockABI() (int, error) {
	v, _, e := syscall.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		if e == unix.ENOSYS || e == unix.EOPNOTSUPP {
			return 0, nil
		}
		return 0, e
	}
	return int(v), nil
}

// restrictThread sets no-new-privileges on the calling OS thread and
// restricts it to rules: the file system rights that this kernel's Landlock
// handles are denied everywhere but where a rule grants them. Where the
// kernel has no Landlock it does nothing (sandbox_info says that Landlock is
// unavailable: probe_linux.go). The caller must be locked to its OS thread
// (runtime.LockOSThread) and exec from it.
func restrictThread(rules []llRule) error {
	abi, err := LandlockABI()
	if err != nil {
		return fmt.Errorf("reading the Landlock ABI version: %w", err)
	}
	if abi < 1 {
		return nil
	}
	handled := llHandled(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	// Only the first field: the kernels of ABI 1 to 3 know no other, and
	// the rest (network, scopes) stays unhandled.
	fd, _, e := syscall.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.Handled_access_fs), 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	defer syscall.Close(int(fd))
	for _, r := range rules {
		access := r.access & handled
		if access == 0 {
			continue
		}
		for _, p := range r.paths {
			if err := llAddPath(int(fd), p, access); err != nil {
				return err
			}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no-new-privileges: %w", err)
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		if e == unix.E2BIG {
			return fmt.Errorf("landlock_restrict_self: the thread's Landlock domains are nested too deep: %w", e)
		}
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	return nil
}

// llAddPath grants access beneath path; a path that does not exist is left
// out.
func llAddPath(ruleset int, path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("Landlock rule for %s: %w", path, err)
	}
	defer unix.Close(fd)
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	if _, _, e := syscall.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0); e != 0 {
		if e == unix.EINVAL {
			return fmt.Errorf("Landlock rule for %s: directory rights on a file that is not a directory: %w", path, e)
		}
		return fmt.Errorf("Landlock rule for %s: %w", path, e)
	}
	return nil
}
