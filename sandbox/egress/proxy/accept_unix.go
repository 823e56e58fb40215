//go:build unix

package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// socketFile returns a descriptor of the listening socket l of its own,
// which the runtime's poller can wait on (the net package's listeners let
// nobody wait on theirs: their RawConn's Read fails), for acceptNow and
// dropQueued. It shares the socket, and its non-blocking mode, with l.
func socketFile(l syscall.Conn) (*os.File, error) {
	rc, err := l.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		syscall.ForkLock.RLock()
		nfd, derr = syscall.Dup(int(fd))
		if derr == nil {
			syscall.CloseOnExec(nfd)
		}
		syscall.ForkLock.RUnlock()
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	// A non-blocking descriptor: NewFile registers it with the poller.
	return os.NewFile(uintptr(nfd), "egress listener"), nil
}

// acceptFD takes the first connection queued on the listening socket fd
// without waiting (the socket is non-blocking, as Go makes every one): its
// descriptor, or syscall.EAGAIN when none is queued. A connection that was
// aborted in the queue, or an interrupted call, is passed over.
func acceptFD(fd uintptr) (int, error) {
	for {
		// As the net package does where accept4 is missing: no fork
		// between the accept and close-on-exec.
		syscall.ForkLock.RLock()
		nfd, _, err := syscall.Accept(int(fd))
		if err == nil {
			syscall.CloseOnExec(nfd)
		}
		syscall.ForkLock.RUnlock()
		if errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EINTR) {
			continue
		}
		return nfd, err
	}
}

// acceptNow is acceptFD, as a net.Conn.
func acceptNow(fd uintptr) (net.Conn, error) {
	nfd, err := acceptFD(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "")
	defer f.Close() // FileConn has its own descriptor
	return net.FileConn(f)
}

// dropQueued closes every connection queued on the listening socket fd,
// without waiting.
func dropQueued(fd uintptr) {
	for {
		nfd, err := acceptFD(fd)
		if err != nil {
			// EAGAIN: the queue is empty. (Out of descriptors, a
			// connection stays queued: the next part would get it.)
			return
		}
		_ = syscall.Close(nfd)
	}
}
