// Package early runs process mode's internal subcommands (the run
// supervisor and the exec stage, see process.Helpers) when the binary was
// started as one of them, in its first moments: a binary that runs process
// mode imports it, for that effect alone, so that a run's helpers do not
// wait for the server's other packages to initialize.
//
// Go initializes a binary's packages before its main function, each once its
// own imports are done and in import-path order among those ready (Go
// 1.21+), and this package imports nothing but the run core: it runs before
// the MCP SDK, the HTTP stack, the Docker client and the JSON Schema
// compilers. Measured on the project's 2-core VM, a helper started from
// main, after all of them, costs about 11 ms of CPU instead of about 5 ms,
// and every process-mode run starts two. cmd/codeexec lists the same
// subcommands in its table of commands, where main would run them
// otherwise.
package early

import "github.com/codeexec/codeexec/sandbox/internal/executor"

func init() { executor.MaybeRunHelper() }
