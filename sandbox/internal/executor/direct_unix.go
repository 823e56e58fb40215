//go:build unix

package executor

import (
	"github.com/codeexec/codeexec/sandbox"
)

// startDirect starts the program itself, without a supervisor, in a process
// group of its own; stopping the run kills that group. afterExit, if set,
// runs once the program has been waited for (Linux uses it to sweep the
// run's orphans).
func startDirect(spec Spec, out *sandbox.Output, afterExit func(pid int)) (*supervised, error) {
	// Whatever the server holds without close-on-exec stays with it.
	_ = CloseInheritedOnExec()
	cmd := commandOf(spec, out, spec.Path, spec.Args...)
	cmd.SysProcAttr = directAttr()
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
