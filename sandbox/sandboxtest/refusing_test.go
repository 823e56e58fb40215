//go:build unix

package sandboxtest_test

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// A refusing address refuses connections, and no listener can take its
// port while the test holds it.
func TestRefusingAddr(t *testing.T) {
	addr := sandboxtest.RefusingAddr(t)
	for range 3 {
		if c, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("dialing %s: %v, want connection refused", addr, err)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a listener took %s, the refusing address's port", addr)
	}
}
