//go:build freebsd || dragonfly

package executor

import "syscall"

// rlimit builds a syscall.Rlimit, whose fields are signed on this system.
func rlimit(v uint64) *syscall.Rlimit { return &syscall.Rlimit{Cur: int64(v), Max: int64(v)} }
