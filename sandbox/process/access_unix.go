//go:build unix

package process

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// oNoFollow makes an open fail on a symbolic link.
const oNoFollow = syscall.O_NOFOLLOW

// access checks whether this process may use path as want says
// (permRead, permWrite, permSearch, or'ed), as access(2) does.
func access(path string, want uint32) error { return unix.Access(path, want) }
