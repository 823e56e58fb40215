//go:build unix && !linux

package executor

import (
	"encoding/json"
	"fmt"
	"os"
	"syscall"
)

const execArg = "__codeexec-sandbox-exec"

// SandboxExec is macOS's command that runs a program under a Seatbelt
// profile.
const SandboxExec = "/usr/bin/sandbox-exec"

// Helpers are the internal subcommands that the run core re-executes the
// binary as, by their first argument: here the exec stage. Each returns the
// exit status.
var Helpers = map[string]func() int{execArg: execMain, SeatbeltProbeArg: seatbeltProbeMain}

// execMain is the exec stage: it reads the Spec on fd 3, sets the limits
// and execs the interpreter (through sandbox-exec with a Seatbelt profile). On failure it writes one line to stderr and
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
	path, argv := spec.Path, append([]string{spec.Path}, spec.Args...)
	if spec.Seatbelt != "" {
		// sandbox-exec applies the profile to itself and execs the
		// program, which then holds it for good, with whatever it starts.
		path, argv = SandboxExec, append([]string{SandboxExec, "-p", spec.Seatbelt, "--"}, argv...)
	}
	err := syscall.Exec(path, argv, spec.Env)
	fmt.Fprintf(os.Stderr, "codeexec: starting %s: %v\n", path, err)
	return 126
}
