//go:build unix && !linux

package process

import (
	"context"
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
	return startDirect(spec, out, nil)
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
	return Isolation{}, ps
}
