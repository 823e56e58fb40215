//go:build linux

package executor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The egress hand-over. With Spec.EgressAddr set, the server gives the
// supervisor one end of a unix socket pair on Spec.EgressFD. The supervisor, once
// in the run's network namespace (with its loopback up), listens on
// EgressAddr and sends the listening socket over the pair (SCM_RIGHTS)
// before it starts the program. The socket stays in the run's namespace,
// where the program connects to it, while the server accepts on it from its
// own: every connection reaches the server's egress proxy and nothing else
// leaves the namespace. The supervisor keeps no copy.

// egressHandOverTimeout bounds the wait for the supervisor's listener.
const egressHandOverTimeout = 10 * time.Second

// egressPair makes the socket pair: the server's end as a *net.UnixConn and
// the supervisor's end as a file to pass to it.
func egressPair() (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("egress socket pair: %w", err)
	}
	server := os.NewFile(uintptr(fds[0]), "egress")
	defer server.Close()
	c, err := net.FileConn(server)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("egress socket pair: %w", err)
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "egress-supervisor"), nil
}

// receiveEgressListener waits for the listener the supervisor sends on c.
func receiveEgressListener(c *net.UnixConn) (net.Listener, error) {
	_ = c.SetReadDeadline(time.Now().Add(egressHandOverTimeout))
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("receiving the run's egress listener: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, errors.New("receiving the run's egress listener: no descriptor")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("receiving the run's egress listener: no descriptor")
	}
	f := os.NewFile(uintptr(fds[0]), "egress-listener")
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("receiving the run's egress listener: %w", err)
	}
	return l, nil
}

// sendEgressListener runs in the supervisor, in the run's network
// namespace: it listens on addr and sends the socket on the pair's fd.
func sendEgressListener(addr string, fd int) error {
	pair := os.NewFile(uintptr(fd), "egress")
	defer pair.Close()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for the egress proxy on %s: %w", addr, err)
	}
	defer l.Close()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		return fmt.Errorf("egress listener: %w", err)
	}
	defer f.Close()
	if err := unix.Sendmsg(fd, []byte{1}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
		return fmt.Errorf("handing over the egress listener: %w", err)
	}
	return nil
}
