package kube

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
)

// These tests run the relay's python program on this machine, its stdin and
// stdout piped to a relayMux as a pods/exec stream would be: the framing,
// the windows and the ends, without a cluster.

// localRelay is the relay running here, and the server's end of it.
type localRelay struct {
	mux  *relayMux
	cmd  *exec.Cmd
	addr string        // where the relay listens
	exit chan struct{} // closed once the relay exited
}

func startLocalRelay(t *testing.T) *localRelay {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to run the relay with")
	}
	cmd := exec.Command(python, relayCommand(python, 0)[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Not cmd.StdoutPipe: Wait closes that pipe once the relay exits,
	// racing the mux's last read (which then sees "file already closed",
	// not the stream's end). The mux owns the read end here, as it owns
	// the exec stream's in kubernetes mode.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = stdoutW
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Start()
	_ = stdoutW.Close()
	if err != nil {
		_ = stdout.Close()
		t.Fatal(err)
	}
	lr := &localRelay{mux: newRelayMux(stdin), cmd: cmd, exit: make(chan struct{})}
	lr.mux.onEnd = func() { _ = stdin.Close() }
	go func() {
		_ = cmd.Wait()
		close(lr.exit)
	}()
	go lr.mux.serve(stdout)
	t.Cleanup(func() {
		lr.mux.Close()
		_ = cmd.Process.Kill()
		<-lr.exit
		<-lr.mux.done
		_ = stdout.Close()
	})
	select {
	case <-lr.mux.ready:
	case <-lr.mux.done:
		<-lr.exit
		t.Fatalf("the relay did not start: %v: %s", lr.mux.Err(), stderr.String())
	}
	lr.mux.mu.Lock()
	lr.addr = net.JoinHostPort(relayHost, strconv.Itoa(lr.mux.port))
	lr.mux.mu.Unlock()
	return lr
}

// pair dials the relay and returns both ends of the connection: the
// client's, and the server's as the mux accepted it. t's cleanup closes
// both.
func (lr *localRelay) pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", lr.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	sc, err := lr.mux.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Close() })
	return c, sc
}

// serveEcho echoes every connection the mux accepts: it reads to the end,
// writing back what it read, then closes its side.
func serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
			_ = c.(*relayConn).CloseWrite()
		}()
	}
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRelayCarriesConnections sends a megabyte each way on many connections
// at once (sixteen windows each), half-closes them and checks every byte.
func TestRelayCarriesConnections(t *testing.T) {
	lr := startLocalRelay(t)
	go serveEcho(lr.mux)
	const conns, size = 24, 1 << 20
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", lr.addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			data := randomBytes(t, size)
			go func() {
				_, _ = c.Write(data)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				errs <- fmt.Errorf("connection %d: %v", i, err)
				return
			}
			if !bytes.Equal(got, data) {
				errs <- fmt.Errorf("connection %d: %d bytes came back, not the %d sent", i, len(got), len(data))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := lr.mux.Err(); err != nil {
		t.Fatalf("the mux ended: %v", err)
	}
	waitConns(t, lr.mux, 0)
}

// waitConns waits until the mux holds n connections.
func waitConns(t *testing.T, m *relayMux, n int) {
	t.Helper()
	for {
		m.mu.Lock()
		got, changed := len(m.conns), m.changed
		m.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-m.done:
			t.Fatalf("the mux ended with %d connections, want %d: %v", got, n, m.Err())
		case <-changed:
		}
	}
}

// TestRelayUnreadConnectionStallsNoOther: a client that reads nothing of
// what the server sends holds up only its own connection: the server's
// write to it waits for room while another connection goes on, and
// completes once the client reads.
func TestRelayUnreadConnectionStallsNoOther(t *testing.T) {
	lr := startLocalRelay(t)
	slow, sc := lr.pair(t)
	big := randomBytes(t, 8<<20) // far beyond the window and the sockets' buffers
	wrote := make(chan error, 1)
	go func() {
		_, err := sc.Write(big)
		_ = sc.(*relayConn).CloseWrite()
		wrote <- err
	}()
	// Meanwhile another connection is served, whole.
	go serveEcho(lr.mux)
	other, err := net.Dial("tcp", lr.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	msg := randomBytes(t, 256<<10)
	go func() {
		_, _ = other.Write(msg)
		_ = other.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(other)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("the other connection: %d bytes, %v", len(got), err)
	}
	select {
	case err := <-wrote:
		t.Fatalf("the write to a client that reads nothing finished (%v): nothing held it back", err)
	default:
	}
	got, err = io.ReadAll(slow)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the slow connection: %d bytes, %v", len(got), err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

// TestRelayEnds: the server's end of a connection sees its client's reset
// and end; a deadline stops a read; closing the mux ends the relay, and a
// relay that dies ends the mux and its connections.
func TestRelayEnds(t *testing.T) {
	t.Run("client reset", func(t *testing.T) {
		lr := startLocalRelay(t)
		c, sc := lr.pair(t)
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
		if _, err := io.ReadAll(sc); !errors.Is(err, errRelayClosed) {
			t.Fatalf("reading a connection its client reset: %v, want %v", err, errRelayClosed)
		}
		if _, err := sc.Write([]byte("x")); !errors.Is(err, errRelayClosed) {
			t.Fatalf("writing to a connection its client reset: %v, want %v", err, errRelayClosed)
		}
		_ = sc.Close()
		waitConns(t, lr.mux, 0)
	})
	t.Run("deadline", func(t *testing.T) {
		lr := startLocalRelay(t)
		c, sc := lr.pair(t)
		_ = sc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := sc.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a read past its deadline: %v", err)
		}
		_ = sc.SetReadDeadline(time.Time{})
		if _, err := c.Write([]byte("after")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 5)
		if _, err := io.ReadFull(sc, b); err != nil || string(b) != "after" {
			t.Fatalf("a read once the deadline was lifted: %q %v", b, err)
		}
	})
	t.Run("mux closed", func(t *testing.T) {
		lr := startLocalRelay(t)
		c, _ := lr.pair(t)
		lr.mux.Close()
		<-lr.exit
		if !lr.cmd.ProcessState.Success() {
			t.Fatalf("the relay did not end by itself when its stdin ended: %v", lr.cmd.ProcessState)
		}
		if _, err := lr.mux.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("the client's read once the relay ended: %v", err)
		}
	})
	t.Run("mux closed drops what no one read", func(t *testing.T) {
		lr := startLocalRelay(t)
		c, sc := lr.pair(t)
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		// Until the relay's bytes are held here, unread: each change of
		// the connection wakes this.
		rc := sc.(*relayConn)
		for {
			rc.mu.Lock()
			n, changed := len(rc.buf), rc.changed
			rc.mu.Unlock()
			if n > 0 {
				break
			}
			<-changed
		}
		lr.mux.Close()
		if b, err := io.ReadAll(sc); len(b) != 0 || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("reading, once the mux was closed, what the relay sent before: %q %v, want nothing and %v", b, err, net.ErrClosed)
		}
		// A connection that the relay opens once the mux ended is
		// dropped, never accepted.
		lr.mux.mu.Lock()
		next := lr.mux.lastID + 1
		lr.mux.mu.Unlock()
		if err := lr.mux.handle(frameOpen, next, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-lr.mux.accept:
			t.Fatalf("the mux took connection %d after it ended", c.id)
		default:
		}
	})
	t.Run("relay killed", func(t *testing.T) {
		lr := startLocalRelay(t)
		_, sc := lr.pair(t)
		_ = lr.cmd.Process.Kill()
		if _, err := io.ReadAll(sc); !errors.Is(err, errRelayEnded) {
			t.Fatalf("reading once the relay died: %v, want %v", err, errRelayEnded)
		}
		if _, err := lr.mux.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept once the relay died: %v", err)
		}
	})
}

// TestRelayMaxStreams: the relay refuses connections beyond
// relayMaxStreams at once, and the mux goes on.
func TestRelayMaxStreams(t *testing.T) {
	lr := startLocalRelay(t)
	var held, served []net.Conn
	for range relayMaxStreams {
		c, sc := lr.pair(t)
		held, served = append(held, c), append(served, sc)
	}
	extra, err := net.Dial("tcp", lr.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if n, err := extra.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a connection beyond %d was kept (read %d bytes)", relayMaxStreams, n)
	}
	if err := lr.mux.Err(); err != nil {
		t.Fatalf("the mux ended: %v", err)
	}
	// Once one ends, another is carried. The relay takes frames in order:
	// once a byte sent after the end reached its client, the relay has
	// let the connection go.
	_ = served[0].Close()
	if _, err := served[1].Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(held[1], make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	go serveEcho(lr.mux)
	c, err := net.Dial("tcp", lr.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(c); string(got) != "again" {
		t.Fatalf("a connection after one ended: %q %v", got, err)
	}
}

// TestRelayCarriesTheProxy serves a proxy session on the mux, as a run pod's
// is: a request through the relay reaches an allowed listener, one for
// another destination is refused, and the report says both.
func TestRelayCarriesTheProxy(t *testing.T) {
	lr := startLocalRelay(t)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "backend-ok") }))
	defer backend.Close()
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	allow, err := egress.ParseAllowlist([]string{"allowed.test:" + strconv.Itoa(port)})
	if err != nil {
		t.Fatal(err)
	}
	pins, err := egress.ParsePins("allowed.test=127.0.0.1,other.test=127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	session := proxy.New(egress.Policy{Allow: allow, AllowPrivate: true, Resolver: pins,
		Caps: egress.Caps{Connections: 8, Bytes: 1 << 20, ConnectTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second}}, nil).Serve("relay-test", lr.mux)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: lr.addr})}}
	get := func(u string) (int, string) {
		res, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(fmt.Sprintf("http://allowed.test:%d/", port)); code != 200 || body != "backend-ok" {
		t.Errorf("allowed: %d %q", code, body)
	}
	if code, _ := get(fmt.Sprintf("http://other.test:%d/", port)); code != http.StatusForbidden {
		t.Errorf("not allowed: %d, want 403", code)
	}
	client.CloseIdleConnections()
	rep := session.Close()
	if len(rep.Reached) != 1 || rep.Reached[0].Host != "allowed.test" || len(rep.Refused) != 1 || rep.Refused[0].Reason != egress.ReasonNotAllowed {
		t.Fatalf("report %+v", rep)
	}
	<-lr.exit // closing the session closed the mux, which ends the relay
}

// TestRelayProtocolViolations: the server ends a relay's stream that breaks
// the protocol, whatever the frame, and every connection on it.
func TestRelayProtocolViolations(t *testing.T) {
	frame := func(typ byte, id uint32, p []byte) []byte {
		b := make([]byte, relayHeader+len(p))
		b[0] = typ
		binary.BigEndian.PutUint32(b[1:5], id)
		binary.BigEndian.PutUint32(b[5:9], uint32(len(p)))
		copy(b[relayHeader:], p)
		return b
	}
	window := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	open := func(n int) []byte {
		var b []byte
		for i := 1; i <= n; i++ {
			b = append(b, frame(frameOpen, uint32(i), nil)...)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		frames []byte
	}{
		{"unknown type", frame('X', 0, nil)},
		{"oversized frame", frame(frameData, 1, make([]byte, relayMaxData+1))},
		{"open out of order", append(open(1), frame(frameOpen, 3, nil)...)},
		{"open again", append(open(1), frame(frameOpen, 1, nil)...)},
		{"too many connections", open(relayMaxStreams + 1)},
		{"data for a connection never opened", append(open(1), frame(frameData, 2, []byte("x"))...)},
		{"data beyond the window", append(open(1), bytes.Repeat(frame(frameData, 1, make([]byte, relayMaxData)), relayWindow/relayMaxData+1)...)},
		{"data after the end", append(append(open(1), frame(frameEOF, 1, nil)...), frame(frameData, 1, []byte("x"))...)},
		{"room beyond the window", append(open(1), frame(frameWindow, 1, window(1))...)},
		{"bad window frame", append(open(1), frame(frameWindow, 1, []byte{1})...)},
		{"bad listening frame", frame(frameListening, 0, []byte("port"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newRelayMux(io.Discard)
			ended := make(chan struct{})
			m.onEnd = func() { close(ended) }
			go m.serve(bytes.NewReader(tc.frames))
			<-ended
			if !errors.Is(m.Err(), errRelayProtocol) {
				t.Fatalf("the mux ended with %v, want %v", m.Err(), errRelayProtocol)
			}
		})
	}
	// Frames for a connection closed here are dropped, not an error.
	m := newRelayMux(io.Discard)
	r, w := io.Pipe()
	go m.serve(r)
	if _, err := w.Write(frame(frameOpen, 1, nil)); err != nil {
		t.Fatal(err)
	}
	c, err := m.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if _, err := w.Write(append(frame(frameData, 1, []byte("late")), frame(frameWindow, 1, window(10))...)); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	<-m.done
	if !errors.Is(m.Err(), errRelayEnded) {
		t.Fatalf("frames for a connection closed here ended the mux: %v", m.Err())
	}
}
