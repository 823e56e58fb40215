//go:build linux

package executor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// applySeccomp installs filter, the run's seccomp filter as the server
// assembled it (sandbox/internal/seccompfilter; Isolation.SeccompFilter),
// on every thread of this process, with no-new-privileges, which it needs.
// The exec stage installs it last, before the interpreter starts.
func applySeccomp(filter []byte) error {
	return installSeccomp(filter, unix.SECCOMP_FILTER_FLAG_TSYNC)
}

// installSeccomp installs filter (see applySeccomp) with the seccomp flags
// given: on the calling thread alone without SECCOMP_FILTER_FLAG_TSYNC.
func installSeccomp(filter []byte, flags uintptr) error {
	if len(filter) == 0 || len(filter)%8 != 0 || len(filter)/8 > 0xffff {
		return fmt.Errorf("the run's seccomp filter is malformed (%d bytes)", len(filter))
	}
	prog := make([]unix.SockFilter, len(filter)/8)
	for i := range prog {
		b := filter[8*i:]
		prog[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no-new-privileges: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	tid, _, e := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if e == unix.ENOSYS {
		return errors.New("the kernel does not offer seccomp filters")
	}
	if e != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", e)
	}
	if tid != 0 {
		// With TSYNC, a thread that cannot take the filter is named by the
		// return value, not an error, and no thread gets the filter.
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): thread %d could not take the filter", tid)
	}
	return nil
}
