package executor

import (
	"os"
	"sync/atomic"
)

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

// runCore is the binary that supervisors start from (UseHelper), nil for
// this one.
var runCore atomic.Pointer[string]

// UseHelper makes every supervisor, and so every exec stage, start from the
// binary at path, process mode's run helper (see process.FindHelper),
// instead of this binary; "" goes back to this binary.
func UseHelper(path string) {
	if path == "" {
		runCore.Store(nil)
		return
	}
	runCore.Store(&path)
}

// runCoreBinary is the binary that a supervisor starts from.
func runCoreBinary() (string, error) {
	if p := runCore.Load(); p != nil {
		return *p, nil
	}
	return os.Executable()
}
