package sandboxtest

import (
	"net"
	"testing"
)

// The traps count what reached them before the count, and only that: the
// host's own connection (datagram) ends the count and is not in it.
func TestTraps(t *testing.T) {
	tcp := ListenTCP(t, "127.0.0.1")
	udp := ListenUDP(t, "127.0.0.1")
	if n := tcp.Count(t); n != 0 {
		t.Fatalf("an untouched TCP trap counted %d", n)
	}
	if n := udp.Count(t); n != 0 {
		t.Fatalf("an untouched UDP trap counted %d", n)
	}
	for range 2 {
		c, err := net.Dial("tcp", tcp.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // left open: still counted
	}
	for range 3 {
		c, err := net.Dial("udp", udp.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if n := tcp.Count(t); n != 2 {
		t.Fatalf("the TCP trap counted %d connections, want 2", n)
	}
	if n := udp.Count(t); n != 3 {
		t.Fatalf("the UDP trap counted %d datagrams, want 3", n)
	}
	if n, m := tcp.Count(t), udp.Count(t); n != 0 || m != 0 {
		t.Fatalf("a second count counted %d and %d again", n, m)
	}
}
