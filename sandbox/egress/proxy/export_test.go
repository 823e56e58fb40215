package proxy

import (
	"context"
	"net"
	"sync"
)

// SetDialer replaces the function that connects to checked addresses.
func (p *Proxy) SetDialer(d func(ctx context.Context, network, addr string) (net.Conn, error)) {
	p.dialer = d
}

// ServeHeld is Serve, but the session's server takes no connection off l
// until release is called: until then they wait in l's queue.
func (p *Proxy) ServeHeld(id string, l net.Listener) (s *Session, release func()) {
	gate := make(chan struct{})
	var once sync.Once
	return p.serve(id, l, gate), func() { once.Do(func() { close(gate) }) }
}
