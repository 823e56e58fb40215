//go:build unix && !linux

package process

import (
	"context"
	"os/exec"
	"strings"
	"syscall"

	"github.com/codeexec/codeexec/sandbox"
)

// On Unix systems other than Linux there is no child subreaper and the
// rlimits are not applied in this version: the program runs directly in a
// process group of its own, which is killed when the run ends.

// MaybeRunHelper does nothing outside Linux: there is no supervisor process.
func MaybeRunHelper() {}

// HardenServer does nothing outside Linux.
func HardenServer() error { return nil }

func startSupervisor(spec Spec, out *sandbox.Output) (*supervised, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	if spec.Stdin != "" {
		cmd.Stdin = strings.NewReader(spec.Stdin)
	}
	cmd.Stdout = out.Stdout()
	cmd.Stderr = out.Stderr()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// A stop request (SIGTERM to the "supervisor") must reach the whole group.
	sup := &supervised{cmd: cmd}
	sup.status = func() status {
		killGroup(cmd.Process.Pid)
		ps := cmd.ProcessState
		if ps == nil {
			return status{Error: "the program did not run"}
		}
		ws, ok := ps.Sys().(syscall.WaitStatus)
		if !ok {
			return status{Started: true, ExitCode: ps.ExitCode()}
		}
		if ws.Signaled() {
			return status{Started: true, ExitCode: 128 + int(ws.Signal()), Signal: ws.Signal().String()}
		}
		return status{Started: true, ExitCode: ws.ExitStatus()}
	}
	return sup, nil
}

func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// probeIsolation reports every kernel isolation feature as unavailable:
// they need Linux.
func (r *Runner) probeIsolation(ctx context.Context, disabled []Feature) (Isolation, []sandbox.Protection) {
	var ps []sandbox.Protection
	for _, f := range Features {
		ps = append(ps, sandbox.Protection{Name: protectionName(f), Detail: "needs Linux"})
	}
	return Isolation{}, ps
}
