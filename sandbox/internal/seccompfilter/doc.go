// Package seccompfilter is process mode's seccomp filter on Linux, in the
// spirit of Docker's default profile: everything is allowed except the
// system calls that widen the kernel's attack surface or undo the sandbox.
// The server assembles it once (Program) and passes it in each run's Spec
// (executor.Isolation.SeccompFilter); the run's exec stage installs it last,
// before the interpreter starts, so the program and everything it starts
// run under it (a filter is inherited and cannot be removed). The run
// helper does not link this package, nor the assembler: a helper start
// would otherwise initialize go-seccomp-bpf's tables of every
// architecture's system calls.
package seccompfilter
