//go:build unix && !linux && !freebsd && !dragonfly

package executor

import "syscall"

// rlimit builds a syscall.Rlimit.
func rlimit(v uint64) *syscall.Rlimit { return &syscall.Rlimit{Cur: v, Max: v} }
