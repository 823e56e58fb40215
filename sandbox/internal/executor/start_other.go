//go:build unix && !linux

package executor

import (
	"encoding/json"
	"fmt"
	"os"
	"syscall"

	"github.com/codeexec/codeexec/sandbox"
)

// On Unix systems other than Linux there is no child subreaper and no
// kernel isolation: the program runs in a process group of its own, which is
// killed when the run ends. In process mode the binary re-executes itself as
// the exec stage (execstage_other.go), which sets the resource limits this
// system enforces and then execs the interpreter: on macOS through
// sandbox-exec, under the run's Seatbelt profile (Spec.Seatbelt).

// startRun starts the program in a process group of its own: through the
// exec stage when it has rlimits or a Seatbelt profile, directly otherwise.
func startRun(spec Spec, out *sandbox.Output) (*supervised, error) {
	if spec.EgressServe != nil {
		return nil, errEgressNeedsLinux
	}
	if !spec.Rlimits && spec.Seatbelt == "" {
		return startDirect(spec, out, nil)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the codeexec binary: %w", err)
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := commandOf(spec, out, exe, execArg)
	cmd.ExtraFiles = []*os.File{cfgR}
	cmd.SysProcAttr = directAttr()
	err = startTracked(cmd)
	cfgR.Close()
	if err != nil {
		cfgW.Close()
		return nil, err
	}
	if err := json.NewEncoder(cfgW).Encode(spec); err != nil {
		killGroup(cmd.Process.Pid)
	}
	cfgW.Close()
	pid := cmd.Process.Pid
	// What the program left holding its output does not hold the run.
	watchExit(pid, func() { killGroup(pid) })
	return &supervised{
		cmd:    cmd,
		stop:   func() { killGroup(pid) },
		status: func() status { untrack(pid); killGroup(pid); return exitStatus(cmd) },
	}, nil
}

func directAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalName(s syscall.Signal) string { return s.String() }

// EnableOrphanReaping does nothing outside Linux.
func EnableOrphanReaping() error { return nil }

func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
