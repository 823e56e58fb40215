package executor

import "os"

// MaybeRunHelper runs the helper that the first argument names (see
// Helpers) and exits with its status; it returns when the process was not
// started as one. A test binary that runs process-mode code calls it first
// in TestMain; codeexec's main runs Helpers as subcommands of its own.
func MaybeRunHelper() {
	if len(os.Args) < 2 {
		return
	}
	if helper, ok := Helpers[os.Args[1]]; ok {
		os.Exit(helper())
	}
}
