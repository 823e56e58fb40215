package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// listener is a session's listener as its server sees it: each connection
// it gives is registered with the session, in the part that runs then,
// under the session's acceptMu, so that Cut closes it with its part (see
// Session.Cut).
//
// A connection that a program made before the cut may still be queued on
// the listener when Cut runs (the program wrote its request, then was
// killed). Cut takes such connections off the queue and closes them
// (drain). For that to be right, taking a connection off the queue and
// registering it must be one step with respect to Cut: a server that took
// one from the kernel just before the cut and registered it just after
// would give it to the next part. So, where it can, the listener takes
// connections itself, without blocking, while it holds acceptMu (and waits
// for the next one without it): on a TCP or unix socket listener of a unix
// system (socketFile, acceptNow, dropQueued). Elsewhere it uses the
// listener's own Accept, and a connection still queued at a cut goes to
// the next part.
type listener struct {
	net.Listener
	s *Session
	// f is the listening socket (socketFile) and rc its RawConn, nil
	// when the listener is not one that acceptNow can take connections
	// from.
	f  *os.File
	rc syscall.RawConn
	// gate, when not nil, holds each Accept until it can receive from it
	// (tests: a connection then waits in the queue).
	gate <-chan struct{}
}

func newListener(s *Session, l net.Listener, gate <-chan struct{}) *listener {
	ln := &listener{Listener: l, s: s, gate: gate}
	switch l.(type) {
	case *net.TCPListener, *net.UnixListener:
		f, err := socketFile(l.(syscall.Conn))
		if err != nil {
			return ln
		}
		rc, err := f.SyscallConn()
		if err != nil {
			_ = f.Close()
			return ln
		}
		ln.f, ln.rc = f, rc
	}
	return ln
}

// Close closes the listener (its socket file too, which ends a wait in
// Accept).
func (l *listener) Close() error {
	if l.f != nil {
		_ = l.f.Close()
	}
	return l.Listener.Close()
}

// Accept waits for the next connection and registers it with the session
// (admit).
func (l *listener) Accept() (net.Conn, error) {
	if l.gate != nil {
		<-l.gate
	}
	if l.rc == nil {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.s.acceptMu.Lock()
		l.s.admit(c)
		l.s.acceptMu.Unlock()
		return c, nil
	}
	var c net.Conn
	var aerr error
	err := l.rc.Read(func(fd uintptr) bool {
		// Read calls this again once the socket is readable (a
		// connection is queued) while it returns false.
		l.s.acceptMu.Lock()
		defer l.s.acceptMu.Unlock()
		c, aerr = acceptNow(fd)
		if errors.Is(aerr, syscall.EAGAIN) || errors.Is(aerr, syscall.EWOULDBLOCK) {
			return false
		}
		if aerr == nil {
			l.s.admit(c)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if aerr != nil {
		// EMFILE, ENFILE and the like: their Temporary tells the
		// server to try again.
		return nil, &net.OpError{Op: "accept", Net: l.Addr().Network(), Addr: l.Addr(), Err: aerr}
	}
	return c, nil
}

// drain takes every connection queued on the listener off it and closes
// it, without waiting; it does nothing for a listener whose connections
// cannot be taken so (rc nil). The caller holds acceptMu.
func (l *listener) drain() {
	if l.rc == nil {
		return
	}
	_ = l.rc.Control(dropQueued)
}

// admit registers c, which the listener just gave, as a connection of the
// part that runs now (closing it when the session is closed). The caller
// holds acceptMu.
func (s *Session) admit(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return
	}
	s.conns[c] = s.cur
}
