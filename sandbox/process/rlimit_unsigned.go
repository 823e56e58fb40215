//go:build unix && !linux && !freebsd && !dragonfly

package process

import "syscall"

// rlimit builds a syscall.Rlimit.
func rlimit(v uint64) *syscall.Rlimit { return &syscall.Rlimit{Cur: v, Max: v} }
