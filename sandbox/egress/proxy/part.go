package proxy

import (
	"net"
	"sync"

	"github.com/codeexec/codeexec/sandbox/egress"
)

// Part is a program's part of the egress proxy (a run's, or a
// session's supervisor's): its proxy session, once its listener is handed
// over. A nil *Part reports nothing.
type Part struct {
	mu sync.Mutex
	s  *Session
}

// NewPart returns a part of p for a program that id names in logs, and the
// function that the mode hands the program's listener to (see Serve); nil
// ones without a proxy (p nil). narrow is the program's own allowlist
// (sandbox.Request.Network, see Session.Restrict): nil for the proxy's.
func NewPart(p *Proxy, id string, narrow *egress.Allowlist) (*Part, func(net.Listener)) {
	if p == nil {
		return nil, nil
	}
	e := &Part{}
	return e, func(l net.Listener) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.s = p.Serve(id, l)
		e.s.Restrict(narrow)
	}
}

// Cut returns what the program reached since the last cut.
func (e *Part) Cut() *egress.Report { return e.report(false) }

// Close ends the proxy session and returns what the program reached since
// the last cut.
func (e *Part) Close() *egress.Report { return e.report(true) }

func (e *Part) report(closing bool) *egress.Report {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.s == nil:
		return nil
	case closing:
		return e.s.Close()
	}
	return e.s.Cut()
}
