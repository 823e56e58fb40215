//go:build unix

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the CPU time, user and system, used so far by t's processes:
// for a server, by the server and every descendant it has waited for
// (/proc/PID/stat: utime, stime, cutime, cstime; a run's supervisor, its
// exec stage and its interpreter are waited for when the run ends, a run
// prepared ahead when it is used); for bare, by the benchmark's waited-for
// children (the interpreters it started; the servers are not waited for
// until the end). It misses the kernel's own work on their behalf in
// kernel threads (such as a network namespace's clean-up). ok is false
// where /proc cannot tell (not Linux).
func cpuTime(t *target) (d time.Duration, ok bool) {
	if t.proc == nil {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
			return 0, false
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", t.proc.Pid))
	if err != nil {
		return 0, false
	}
	// The fields after the command name, which may hold spaces: utime,
	// stime, cutime and cstime are the 14th to 17th fields of the line.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0, false
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, true
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times:
// 100 on every Linux architecture Go supports.
const clockTicks = 100
