//go:build !windows

package process

import (
	"runtime"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// platformProtections are the protections that the run core gives on this
// system, for sandbox_info.
func platformProtections() []sandbox.Protection {
	onLinux := runtime.GOOS == "linux"
	memory := "CPU time, data segment (RLIMIT_DATA: the memory limit, per process), address space (the same, but none for node, whose heap --max-old-space-size bounds, nor when a memory cgroup bounds the run), open files, file size, processes, no core files"
	return []sandbox.Protection{
		{Name: "process group kill", Active: true, Detail: "the run's process group is killed when it ends"},
		{Name: "orphan reaping", Active: onLinux, Detail: ifElse(onLinux, "a child-subreaper supervisor kills daemons, double forks and setsid processes of the run", "needs Linux")},
		{Name: "resource limits (rlimits)", Active: true, Detail: ifElse(onLinux, memory, "CPU time, open files, file size, no core files (this system does not enforce memory rlimits; the process limit is per user and left alone)")},
		{Name: "no-new-privileges", Active: onLinux, Detail: ifElse(onLinux, "setuid binaries cannot raise privileges", "needs Linux")},
		{Name: "no inherited descriptors", Active: true, Detail: "every descriptor above stdio is closed before the program starts, whatever the server inherited"},
		{Name: "own session keyring", Active: onLinux, Detail: ifElse(onLinux, "each run starts in a new, empty session keyring (and the seccomp filter, where active, refuses keyrings altogether)", "needs Linux")},
		{Name: "signals", Active: onLinux, Detail: ifElse(onLinux, "the supervisor ignores every signal a program can send it, and the program starts with default signal dispositions, none blocked", "needs Linux")},
	}
}

// programPath is the PATH of the programs, where they and process mode
// find the interpreters.
func programPath(map[string]sandbox.Interpreter) string { return executor.MinimalPath }

// minimalEnv is the scrubbed environment of a sandboxed program: nothing of
// the server's, PATH path, and HOME and TMPDIR in the work directory.
func minimalEnv(workDir, path string) []string {
	return []string{
		"PATH=" + path,
		"HOME=" + workDir,
		"TMPDIR=" + workDir,
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
		"PWD=" + workDir,
	}
}

// programText is the program file's text: code as it is.
func programText(lang, code string) string { return code }
