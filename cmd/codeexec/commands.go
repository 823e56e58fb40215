package main

import (
	"io"

	"github.com/codeexec/codeexec/sandbox/process"
)

// command is a subcommand of the binary, named by its first argument.
type command struct {
	// run runs it with the arguments after its name and returns the exit
	// status.
	run func(args, environ []string, stdout, stderr io.Writer) int
	// args and help are its line of --help.
	args, help string
	// internal marks the subcommands that codeexec starts itself: process
	// mode's run helpers, which take nothing but their name. --help does
	// not list them.
	internal bool
}

// commands are every subcommand of the binary: the ones people run, and
// the internal ones that process mode re-executes the binary as, for each
// run (process.Helpers: the run supervisor and the exec stage; package
// sandbox/process/early runs them before the other packages initialize).
var commands = func() map[string]command {
	c := map[string]command{
		"approvals": {run: approvalsCommand, args: "list|approve ID|deny ID", help: "answer pending runs (see CODE_EXEC_APPROVAL)"},
		"audit": {run: func(args, _ []string, stdout, stderr io.Writer) int { return auditCommand(args, stdout, stderr) },
			args: "verify FILE", help: "check a CODE_EXEC_AUDIT_LOG file"},
		"token": {run: tokenCommand, args: "verify TOKEN|-", help: "check a run token (CODEEXEC_RUN_TOKEN) with its key"},
	}
	for name, helper := range process.Helpers() {
		c[name] = command{run: func([]string, []string, io.Writer, io.Writer) int { return helper() }, internal: true}
	}
	return c
}()
