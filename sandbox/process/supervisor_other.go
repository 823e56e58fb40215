//go:build unix && !linux

package process

import (
	"context"
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
// the exec stage, which sets the resource limits this system enforces and
// then execs the interpreter.

const execArg = "__codeexec-sandbox-exec"

// MaybeRunHelper turns this process into the exec stage when it was started
// as one, and never returns in that case.
func MaybeRunHelper() {
	if len(os.Args) >= 2 && os.Args[1] == execArg {
		os.Exit(execMain())
	}
}

func init() { MaybeRunHelper() }

// HardenServer does nothing outside Linux.
func HardenServer() error { return nil }

func startSupervisor(spec Spec, out *sandbox.Output) (*supervised, error) {
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

// execMain is the exec stage: it reads the Spec on fd 3, sets the limits
// and execs the interpreter. On failure it writes one line to stderr and
// exits 126, like a shell.
func execMain() int {
	cfg := os.NewFile(3, "spec")
	var spec Spec
	if err := json.NewDecoder(cfg).Decode(&spec); err != nil {
		fmt.Fprintf(os.Stderr, "codeexec: reading the run spec: %v\n", err)
		return 126
	}
	_ = cfg.Close()
	l := spec.Limits
	set := func(res int, v uint64) { _ = syscall.Setrlimit(res, rlimit(v)) }
	// CPU time, open files and file size are enforced on these systems;
	// memory rlimits are not (macOS ignores RLIMIT_AS and RLIMIT_DATA), and
	// RLIMIT_NPROC counts every process of the user, so it is left alone.
	if l.Timeout > 0 {
		set(syscall.RLIMIT_CPU, uint64(max(1, l.CPUs)*l.Timeout.Seconds())+1)
	}
	if l.OpenFiles > 0 {
		set(syscall.RLIMIT_NOFILE, uint64(l.OpenFiles))
	}
	if l.FileSizeBytes > 0 {
		set(syscall.RLIMIT_FSIZE, uint64(l.FileSizeBytes))
	}
	set(syscall.RLIMIT_CORE, 0)
	err := syscall.Exec(spec.Path, append([]string{spec.Path}, spec.Args...), spec.Env)
	fmt.Fprintf(os.Stderr, "codeexec: starting %s: %v\n", spec.Path, err)
	return 126
}

func directAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalName(s syscall.Signal) string { return s.String() }

// EnableOrphanReaping does nothing outside Linux.
func EnableOrphanReaping() error { return nil }

func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// probeIsolation reports every kernel isolation feature as unavailable:
// they need Linux.
func (r *Runner) probeIsolation(ctx context.Context, disabled []Feature) (Isolation, []sandbox.Protection) {
	var ps []sandbox.Protection
	for _, f := range Features {
		ps = append(ps, sandbox.Protection{Name: protectionName(f), Detail: "needs Linux"})
	}
	r.shield = sandbox.Protection{Name: "server out of reach", Detail: "needs Linux: code runs as the server's own user and may read its environment"}
	return Isolation{}, ps
}
