//go:build !unix

package sandboxtest

import (
	"net"
	"testing"
)

// RefusingAddr returns a loopback address where nothing listens: here a
// port whose listener is closed, which another listener may be given
// later (on Unix a bound socket holds the port).
func RefusingAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
