//go:build unix && !linux

package executor

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/codeexec/codeexec/sandbox"
)

// On Unix systems other than Linux there is no child subreaper and no
// kernel isolation: the program runs in a process group of its own, which is
// killed when the run ends. In process mode the binary re-executes itself as
// the exec stage (execstage_other.go), which sets the resource limits this
// system enforces and then execs the interpreter.

// startRun starts the program in a process group of its own: through the
// exec stage when it has rlimits, directly otherwise.
func startRun(spec Spec, out *sandbox.Output) (*supervised, error) {
	if spec.EgressServe != nil {
		return nil, fmt.Errorf("egress needs a network namespace, which needs Linux")
	}
	if !spec.Rlimits {
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
	cmd := exec.Command(exe, execArg)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	if spec.Stdin != "" {
		cmd.Stdin = strings.NewReader(spec.Stdin)
	}
	cmd.Stdout = out.Stdout()
	cmd.Stderr = out.Stderr()
	cmd.ExtraFiles = []*os.File{cfgR}
	cmd.SysProcAttr = directAttr()
	cmd.WaitDelay = stopGrace
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

// Prepared is Linux only: there is no supervisor to start ahead here.
type Prepared struct{}

// Prepare says that supervisors are started ahead on Linux only.
func Prepare(Spec) (*Prepared, error) {
	return nil, fmt.Errorf("prepared supervisors need Linux")
}

// PID is 0.
func (p *Prepared) PID() int { return 0 }

// Alive reports false.
func (p *Prepared) Alive() bool { return false }

// Loaded is nil.
func (p *Prepared) Loaded() <-chan struct{} { return nil }

// Failed is nil.
func (p *Prepared) Failed() <-chan struct{} { return nil }

// Preloaded reports false.
func (p *Prepared) Preloaded() bool { return false }

// Close does nothing.
func (p *Prepared) Close() {}

func (p *Prepared) handOver(Spec, *sandbox.Output) (*supervised, error) {
	return nil, fmt.Errorf("prepared supervisors need Linux")
}
