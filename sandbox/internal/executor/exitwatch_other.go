//go:build unix && !linux && !darwin

package executor

// watchExit does nothing here: a run without a supervisor ends when its
// output closes (or exec.Cmd's WaitDelay passes).
func watchExit(pid int, f func()) {}
