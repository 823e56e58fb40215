// Command codeexec-sandbox is the run helper of codeexec's process mode:
// the run core alone (sandbox/process/early), which every run starts twice,
// as its supervisor and as its exec stage. Installed beside the codeexec
// binary and built from the same code, it is started instead of codeexec
// itself, whose start also initializes the server's packages (see
// process.FindHelper). It does nothing on its own.
package main

import (
	"fmt"
	"os"

	// Runs the helper that the first argument names, and exits.
	_ "github.com/codeexec/codeexec/sandbox/process/early"
)

func main() {
	fmt.Fprintln(os.Stderr, "codeexec-sandbox is the run helper of codeexec's process mode: codeexec starts it for every run when it lies beside the codeexec binary and comes from the same build. It does nothing on its own.")
	os.Exit(2)
}
