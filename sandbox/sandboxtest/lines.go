package sandboxtest

import (
	"fmt"
	"strings"
)

// NumberedLines is n lines "line 00001\n", "line 00002\n", …: an output
// whose every part says where it comes from.
func NumberedLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %05d\n", i)
	}
	return b.String()
}
