package proxy

import "net"

// listener is a session's listener as its server sees it: each connection
// it gives is registered with the session, in the part that runs then, so
// that Cut closes it with its part (see Session.Cut).
type listener struct {
	net.Listener
	s *Session
}

// Accept waits for the next connection and registers it with the session
// (admit).
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.s.admit(c)
	return c, nil
}

// admit registers c, which the listener just gave, as a connection of the
// part that runs now (closing it when the session is closed).
func (s *Session) admit(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return
	}
	s.conns[c] = s.cur
}
