package proxy

import (
	"context"
	"net"
)

// SetDialer replaces the function that connects to checked addresses.
func (p *Proxy) SetDialer(d func(ctx context.Context, network, addr string) (net.Conn, error)) {
	p.dialer = d
}
