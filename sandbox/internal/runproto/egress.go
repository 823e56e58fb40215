package runproto

import (
	"fmt"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// EgressCheckProgram is the python program by which docker and kubernetes
// mode check at start that a sandbox with egress reaches the proxy at
// host:port in it. It reads one line of its stdin first, or its end (so
// that a mode that starts the relay after the sandbox can hold the program
// back until the relay listens), then asks the proxy for a destination
// that is never on an allowlist (the .invalid domain is reserved) and
// prints the first line of the answer.
func EgressCheckProgram(host string, port int) string {
	return fmt.Sprintf(`import socket, sys
sys.stdin.readline()
s = socket.create_connection((%q, %d), timeout=30)
s.sendall(b"CONNECT egress-check.invalid:443 HTTP/1.1\r\nHost: egress-check.invalid:443\r\n\r\n")
print(s.recv(64).decode(errors="replace").split("\r\n")[0])
`, host, port)
}

// EgressCheckFailure says what the run of EgressCheckProgram showed instead
// of a working path to the proxy, given the report of the sandbox's proxy
// session: "" when the proxy answered and its session recorded the request.
func EgressCheckFailure(res *sandbox.Result, rep *egress.Report) string {
	if strings.HasPrefix(res.Stdout, "HTTP/1.1 ") && !rep.Empty() {
		return ""
	}
	return strings.TrimSpace(res.Stdout + " " + res.Stderr)
}
