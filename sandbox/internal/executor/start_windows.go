//go:build windows

package executor

import (
	"syscall"
	"time"

	"golang.org/x/sys/windows"

	"github.com/codeexec/codeexec/sandbox"
)

// On Windows there is no supervisor and no kernel isolation of the Linux
// kind: the server starts the program itself, suspended, puts it in a Job
// Object of its own (job_windows.go) and resumes it. Every process the
// program starts is in that job, cannot leave it, and is killed with it
// when the program ends, when the run is stopped, or when the server dies.
// With Spec.Rlimits, the job bounds the memory, the processes and the CPU
// time of the whole run. Nothing here limits what files or network the
// program reaches: it has the server's user's rights.

// startRun starts the program in a job object of its own.
func startRun(spec Spec, out *sandbox.Output) (*supervised, error) {
	if spec.EgressServe != nil {
		return nil, errEgressNeedsLinux
	}
	var lim jobLimits
	if spec.Rlimits {
		lim = jobLimitsOf(spec.Limits)
	}
	j, err := newJob(lim)
	if err != nil {
		return nil, err
	}
	cmd := commandOf(spec, out, spec.Path, spec.Args...)
	// Suspended until it is in its job; a process group of its own; no
	// console window of its own when the server has none.
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: windows.CREATE_SUSPENDED | windows.CREATE_NEW_PROCESS_GROUP | windows.CREATE_NO_WINDOW}
	if err := startTracked(cmd); err != nil {
		j.close()
		return nil, err
	}
	pid := cmd.Process.Pid
	if err := j.adopt(pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		untrack(pid)
		j.close()
		return nil, err
	}
	return &supervised{
		cmd:  cmd,
		stop: j.stop,
		status: func() status {
			untrack(pid)
			j.close()
			st := exitStatus(cmd)
			if j.wasStopped() && st.Started {
				st.ExitCode, st.Signal = killedExitCode, "killed"
			}
			return st
		},
	}, nil
}

// jobLimitsOf are the job limits of a run with limits l: its memory, its
// processes, and CPU time for its timeout at its CPU limit (as RLIMIT_CPU
// on Unix).
func jobLimitsOf(l sandbox.Limits) jobLimits {
	lim := jobLimits{MemoryBytes: l.MemoryBytes, Processes: l.Processes}
	if l.Timeout > 0 {
		lim.CPUTime = time.Duration(max(1, l.CPUs)*float64(l.Timeout)) + time.Second
	}
	return lim
}

// killGroup kills the process pid (its job, where it has one, is
// terminated by its run's stop).
func killGroup(pid int) {
	if h, err := windows.OpenProcess(windows.PROCESS_TERMINATE, false, uint32(pid)); err == nil {
		_ = windows.TerminateProcess(h, killedExitCode)
		_ = windows.CloseHandle(h)
	}
}

func signalName(s syscall.Signal) string { return s.String() }

// EnableOrphanReaping does nothing on Windows: a run's job object holds
// every process it starts.
func EnableOrphanReaping() error { return nil }

// CloseInheritedOnExec does nothing on Windows: os/exec passes a program
// only its standard handles (an explicit handle list), whatever the server
// holds.
func CloseInheritedOnExec() error { return nil }

// Helpers is empty on Windows: the server starts programs itself.
var Helpers = map[string]func() int{}
