//go:build !unix

package main

import "time"

// cpuTime cannot tell on this system.
func cpuTime(*target) (time.Duration, bool) { return 0, false }
