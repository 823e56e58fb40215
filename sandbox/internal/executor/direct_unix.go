//go:build unix

package executor

import (
	"os/exec"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
)

// startDirect starts the program itself, without a supervisor, in a process
// group of its own; stopping the run kills that group. afterExit, if set,
// runs once the program has been waited for (Linux uses it to sweep the
// run's orphans).
func startDirect(spec Spec, out *sandbox.Output, afterExit func(pid int)) (*supervised, error) {
	// Whatever the server holds without close-on-exec stays with it.
	_ = CloseInheritedOnExec()
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	if spec.Stdin != "" {
		cmd.Stdin = strings.NewReader(spec.Stdin)
	}
	cmd.Stdout = out.Stdout()
	cmd.Stderr = out.Stderr()
	cmd.SysProcAttr = directAttr()
	cmd.WaitDelay = stopGrace
	if err := startTracked(cmd); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	return &supervised{
		cmd:  cmd,
		stop: func() { killGroup(pid) },
		status: func() status {
			untrack(pid)
			killGroup(pid)
			if afterExit != nil {
				afterExit(pid)
			}
			return exitStatus(cmd)
		},
	}, nil
}
