// Package procfs reads whether a process is alive from Linux's /proc, for
// the supervisors that sweep a run's processes and the suites that check
// that none outlived it.
//
// A process whose first thread called exit(2), the system call, runs on in
// its other threads while /proc/PID/stat says Z and /proc/PID/cmdline and
// environ read empty: it is no zombie, and it cannot be reaped until they
// end. What is read of such a process is read through a live thread.
package procfs

import (
	"os"
	"path/filepath"
	"strings"
)

// LiveTask returns the /proc directory of a live thread of the process of
// /proc directory dir (/proc/PID): dir itself unless its first thread has
// ended, then another of its threads that has not, or "" when none has.
func LiveTask(dir string) string {
	if !TaskEnded(dir) {
		return dir
	}
	first := filepath.Base(dir)
	tasks, _ := os.ReadDir(filepath.Join(dir, "task"))
	for _, t := range tasks {
		if d := filepath.Join(dir, "task", t.Name()); t.Name() != first && !TaskEnded(d) {
			return d
		}
	}
	return ""
}

// TaskEnded reports whether the task of /proc directory dir has exited
// (state Z or X) or is gone.
func TaskEnded(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	return s[i+2] == 'Z' || s[i+2] == 'X'
}
