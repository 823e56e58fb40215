package sandboxtest

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Traps are host listeners that a sandboxed program must not reach. Count
// says how many connections (datagrams) reached a trap before it asked,
// without waiting on a clock for packets "in flight": it sends its own
// connection (datagram), carrying a nonce, from the host and counts what
// the trap received before it, in the order the kernel queued them. (The
// nonce, not the source address, tells its own apart: a host may rewrite
// the source of its own traffic to a local address.) Ask after the run has
// returned: whatever the program sent is queued by then.

// trapWait bounds a wait for the trap's own connection or datagram, which
// the host's kernel delivers at once: it only keeps a broken test from
// hanging until the test binary's timeout.
const trapWait = time.Minute

// TCPTrap is a TCP listener that counts the connections it accepts.
type TCPTrap struct {
	ln net.Listener
	// got has the place in the order of each accepted connection and what
	// it sent first (up to a nonce's length).
	got     chan received
	counted int // the connections counted so far, the trap's own included
}

// received is one connection (datagram): its place in the order the trap
// took them, and what it carried first.
type received struct {
	n    int
	data string
}

// ListenTCP starts a TCPTrap on host (an IP address), on a free port; it
// is closed when the test ends.
func ListenTCP(t testing.TB, host string) *TCPTrap {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("trap: %v", err)
	}
	tr := &TCPTrap{ln: ln, got: make(chan received, 1024)}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				b := make([]byte, nonceLen)
				k, _ := io.ReadFull(c, b)
				tr.got <- received{n, string(b[:k])}
				c.Close()
			}()
		}
	}()
	return tr
}

// Addr is the trap's address (host:port).
func (tr *TCPTrap) Addr() string { return tr.ln.Addr().String() }

// Port is the trap's port.
func (tr *TCPTrap) Port() int { return tr.ln.Addr().(*net.TCPAddr).Port }

// Count returns how many connections the trap accepted before this call
// (since the last Count).
func (tr *TCPTrap) Count(t testing.TB) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", tr.Addr(), trapWait)
	if err != nil {
		t.Fatalf("trap: connecting to %s: %v", tr.Addr(), err)
	}
	defer c.Close()
	nonce := newNonce()
	if _, err := c.Write([]byte(nonce)); err != nil {
		t.Fatalf("trap: writing to %s: %v", tr.Addr(), err)
	}
	own := awaitNonce(t, tr.got, nonce, "connection")
	n := own - tr.counted
	tr.counted = own + 1
	return n
}

// UDPTrap is a UDP socket that counts the datagrams it receives.
type UDPTrap struct {
	pc      net.PacketConn
	got     chan received
	counted int
}

// ListenUDP starts a UDPTrap on host (an IP address), on a free port; it
// is closed when the test ends.
func ListenUDP(t testing.TB, host string) *UDPTrap {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("trap: %v", err)
	}
	tr := &UDPTrap{pc: pc, got: make(chan received, 1024)}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 64<<10)
		for n := 0; ; n++ {
			k, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			tr.got <- received{n, string(buf[:min(k, nonceLen)])}
		}
	}()
	return tr
}

// Addr is the trap's address (host:port).
func (tr *UDPTrap) Addr() string { return tr.pc.LocalAddr().String() }

// Port is the trap's port.
func (tr *UDPTrap) Port() int { return tr.pc.LocalAddr().(*net.UDPAddr).Port }

// Count returns how many datagrams the trap received before this call
// (since the last Count).
func (tr *UDPTrap) Count(t testing.TB) int {
	t.Helper()
	c, err := net.Dial("udp", tr.Addr())
	if err != nil {
		t.Fatalf("trap: %v", err)
	}
	defer c.Close()
	nonce := newNonce()
	if _, err := c.Write([]byte(nonce)); err != nil {
		t.Fatalf("trap: sending to %s: %v", tr.Addr(), err)
	}
	own := awaitNonce(t, tr.got, nonce, "datagram")
	n := own - tr.counted
	tr.counted = own + 1
	return n
}

const nonceLen = 32

func newNonce() string {
	b := make([]byte, nonceLen/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// awaitNonce returns the place in the order of what carried nonce.
func awaitNonce(t testing.TB, got <-chan received, nonce, what string) int {
	t.Helper()
	timeout := time.NewTimer(trapWait)
	defer timeout.Stop()
	for {
		select {
		case r := <-got:
			if r.data == nonce {
				return r.n
			}
		case <-timeout.C:
			t.Fatalf("trap: the host's own %s never arrived", what)
			return 0
		}
	}
}
