//go:build unix

package executor

import (
	"sync"

	"github.com/codeexec/codeexec/sandbox"
)

// startDirect starts the program itself, without a supervisor, in a process
// group of its own; stopping the run kills that group. afterExit, if set,
// runs once the program has ended (Linux uses it to sweep the run's
// orphans). Where the program's end can be seen before it is waited for
// (watchExit), its group is killed and afterExit runs then, so that what
// it left holding its output does not hold the run; elsewhere once it has
// been waited for.
func startDirect(spec Spec, out *sandbox.Output, afterExit func(pid int)) (*supervised, error) {
	// Whatever the server holds without close-on-exec stays with it.
	_ = CloseInheritedOnExec()
	cmd := commandOf(spec, out, spec.Path, spec.Args...)
	cmd.SysProcAttr = directAttr()
	if err := startTracked(cmd); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	// ended kills the group and sweeps, once: when the program's end is
	// seen, or else once it is waited for (a wait meanwhile waits for it).
	var once sync.Once
	ended := func() {
		once.Do(func() {
			killGroup(pid)
			if afterExit != nil {
				afterExit(pid)
			}
		})
	}
	watchExit(pid, ended)
	return &supervised{
		cmd:  cmd,
		stop: func() { killGroup(pid) },
		status: func() status {
			untrack(pid)
			ended()
			return exitStatus(cmd)
		},
	}, nil
}
