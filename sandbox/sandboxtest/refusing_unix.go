//go:build unix

package sandboxtest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusingAddr returns a loopback address where connections are refused
// for as long as the test runs: a socket is bound there and never listens.
// A port that a listener had and closed is not that: on a busy machine
// another test's listener can be given it, and a connection meant to be
// refused reaches a server that may never answer. The socket is bound
// without SO_REUSEADDR, so no other socket can take the port while it is
// held, and the kernel picks no connection's own port there either.
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("a socket for a refusing address: %v", err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("binding a refusing address: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("the refusing address: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
