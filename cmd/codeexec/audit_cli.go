package main

import (
	"fmt"
	"io"

	"github.com/codeexec/codeexec/approvals/audit"
)

// auditCommand runs `codeexec audit verify FILE` with args (after "audit")
// and returns the exit status: 0 intact, 1 tampered or unreadable, 2 usage.
func auditCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "verify" {
		fmt.Fprintln(stderr, "Usage: codeexec audit verify FILE")
		return 2
	}
	sum, err := audit.VerifyFile(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "codeexec audit verify: %s: %v\n", args[1], err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: intact, %d entries, last hash %s\n", args[1], sum.Entries, sum.LastHash)
	return 0
}
