package kube

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The egress relay of kubernetes mode (CODE_EXEC_NETWORK=allowlist).
//
// A run's pod keeps its deny-all network: nothing in it has a route to the
// server. Its one way out is a pods/exec stream that the server opens to a
// small python3 program in the pod, the relay (relayProgram), before the
// program is handed over. The relay listens on the pod's loopback and
// carries every connection it accepts over that one stream's stdin and
// stdout, in frames; the server's end (relayMux) turns each into a net.Conn
// that it hands, through relayMux's net.Listener, to the run's session of
// codeexec's egress proxy. The stream is the run pod's own, so every
// connection on it is the run's: the proxy makes every decision.
//
// A frame is a header of relayHeader bytes: its type (one byte), the
// connection's id (four bytes, big-endian) and the length of its payload
// (four bytes), at most relayMaxData; then the payload. The types:
//
//	L  relay → server, id 0: the relay listens (payload: its port and its
//	   pid in the pod, decimal, separated by a space)
//	O  relay → server: a new connection, with the next id (1, 2, ...)
//	D  either way: bytes of the connection
//	E  either way: the sender sends no more bytes (a half-close)
//	C  either way: the connection is over; the relay writes what it still
//	   holds to its socket first; the receiver forgets the id
//	W  either way: the receiver of D frames may be sent this many more
//	   bytes (payload: four bytes, big-endian)
//
// Each side may have at most relayWindow bytes of a connection in flight
// that the other has not granted back with W: neither end ever holds more
// than that per connection, and one connection that is not read never
// stalls the others. The relay accepts at most relayMaxStreams connections
// at once.
//
// The relay runs as the pod's user, like the program, so the program can
// kill it: it then has no network left, never more. It makes itself not
// dumpable before it listens, so that no process of the run can read or
// write its descriptors (the exec stream) or trace it, and it ignores every
// signal that can be ignored. Whatever reaches the server on the stream,
// even a forged frame, is the run's own traffic to the run's own proxy
// session: the server checks every frame (an unknown type, an oversized
// or out-of-window frame, too many connections end the stream) and the
// proxy checks every destination. The relay ends with the run: the run's
// supervisor kills every process of the pod but itself once the program
// ended (the relay with the rest), a kill of the run kills it too, and the
// server ends the stream when it releases the pod. A session's pod keeps
// its relay across calls (its supervisor spares it) and ends it with the
// session (see sessionEgress).

const (
	// relayHost and relayPort are where the relay listens in the pod.
	relayHost = "127.0.0.1"
	relayPort = 3128
	// relayHeader is the size of a frame's header.
	relayHeader = 9
	// relayMaxData bounds a frame's payload.
	relayMaxData = 16 << 10
	// relayWindow is what one side may send on a connection before the
	// other grants more.
	relayWindow = 64 << 10
	// relayMaxStreams bounds the connections open at once.
	relayMaxStreams = 256
)

// The frame types.
const (
	frameListening = 'L'
	frameOpen      = 'O'
	frameData      = 'D'
	frameEOF       = 'E'
	frameClose     = 'C'
	frameWindow    = 'W'
)

// relayAddr is the proxy address programs see (HTTP_PROXY).
var relayAddr = net.JoinHostPort(relayHost, strconv.Itoa(relayPort))

// relayProgram is the relay: python3 -I -S -B -c relayProgram <port>. It
// listens on relayHost at port (0: any), says so with an L frame, and
// serves frames until its stdin ends.
var relayProgram = fmt.Sprintf(`import ctypes, os, selectors, signal, socket, struct, sys
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
for s in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}:
    try:
        signal.signal(s, signal.SIG_IGN)
    except (OSError, ValueError):
        pass
WINDOW, MAXDATA, MAXSTREAMS = %d, %d, %d
H = struct.Struct(">cII")
N = struct.Struct(">I")
R, W = selectors.EVENT_READ, selectors.EVENT_WRITE
sel = selectors.DefaultSelector()
def send(t, i, p=b""):
    b = H.pack(t, i, len(p)) + p
    while b:
        b = b[os.write(1, b):]
class S:
    def __init__(self, i, s):
        self.i, self.s, self.credit, self.out, self.ev = i, s, WINDOW, bytearray(), 0
        self.rdone = self.wdone = self.closing = False
streams = {}
def update(st):
    ev = 0
    if st.s is not None:
        if not st.rdone and st.credit > 0:
            ev |= R
        if st.out:
            ev |= W
    if ev == st.ev:
        return
    if st.ev == 0:
        sel.register(st.s, ev, st)
    elif ev == 0:
        sel.unregister(st.s)
    else:
        sel.modify(st.s, ev, st)
    st.ev = ev
def drop(st):
    if st.s is not None:
        if st.ev:
            sel.unregister(st.s)
            st.ev = 0
        st.s.close()
        st.s = None
def settle(st):
    # What is left to do once the server's bytes are written out.
    if st.out or st.s is None:
        return
    if st.closing:
        drop(st)
        del streams[st.i]
        return
    if st.wdone:
        try:
            st.s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        if st.rdone:
            drop(st)
def reset(st):
    send(b"C", st.i)
    drop(st)
    del streams[st.i]
def readable(st):
    try:
        d = st.s.recv(min(st.credit, MAXDATA))
    except BlockingIOError:
        return
    except OSError:
        reset(st)
        return
    if d:
        st.credit -= len(d)
        send(b"D", st.i, d)
    else:
        st.rdone = True
        send(b"E", st.i)
        settle(st)
    if st.i in streams:
        update(st)
def writable(st):
    try:
        n = st.s.send(st.out)
    except BlockingIOError:
        return
    except OSError:
        reset(st)
        return
    del st.out[:n]
    send(b"W", st.i, N.pack(n))
    settle(st)
    if st.i in streams:
        update(st)
def frame(t, i, p):
    st = streams.get(i)
    if st is None:
        return
    if t == b"D":
        if st.s is not None and not st.closing:
            st.out += p
    elif t == b"E":
        st.wdone = True
    elif t == b"C":
        st.closing = st.rdone = True
    elif t == b"W":
        st.credit += N.unpack(p)[0]
    settle(st)
    if st.i in streams:
        update(st)
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("%s", int(sys.argv[1])))
l.listen(128)
l.setblocking(False)
sel.register(l, R, "listener")
sel.register(0, R, "stdin")
send(b"L", 0, b"%%d %%d" %% (l.getsockname()[1], os.getpid()))
nid = 0
buf = bytearray()
while True:
    for key, ev in sel.select():
        if key.data == "listener":
            while True:
                try:
                    c, _ = l.accept()
                except OSError:
                    break
                if len(streams) >= MAXSTREAMS:
                    c.close()
                    continue
                nid += 1
                c.setblocking(False)
                st = streams[nid] = S(nid, c)
                send(b"O", nid)
                update(st)
        elif key.data == "stdin":
            d = os.read(0, 1 << 16)
            if not d:
                os._exit(0)
            buf += d
            while len(buf) >= H.size:
                t, i, n = H.unpack_from(buf)
                if len(buf) < H.size + n:
                    break
                p = bytes(buf[H.size:H.size + n])
                del buf[:H.size + n]
                frame(t, i, p)
        elif key.data.i in streams and key.data.s is not None:
            st = key.data
            if ev & W:
                writable(st)
            if ev & R and st.i in streams and st.s is not None:
                readable(st)
`, relayWindow, relayMaxData, relayMaxStreams, relayHost)

// relayCommand is the relay's command line in a pod whose python3 is python.
func relayCommand(python string, port int) []string {
	return []string{python, "-I", "-S", "-B", "-c", relayProgram, strconv.Itoa(port)}
}

// errRelayProtocol is what the server reports when the relay's side of the
// stream breaks the protocol.
var errRelayProtocol = errors.New("the egress relay broke the protocol")

// errRelayEnded is a connection's error once the relay's stream ended.
var errRelayEnded = errors.New("the egress relay's stream ended")

// relayMux is the server's end of a relay's stream, and the listener of the
// connections that the relay accepts. Frames to the relay go to w; the
// relay's frames are read by serve. It ends, and with it every connection,
// when the stream ends, when the relay breaks the protocol, or when Close
// is called; onEnd (when set before serve) runs then, once.
type relayMux struct {
	w     io.Writer
	wmu   sync.Mutex // one frame at a time
	onEnd func()

	mu    sync.Mutex
	conns map[uint32]*relayConn // open here
	// changed is closed, and replaced, whenever conns changes: what waits
	// for a number of connections (tests) waits on it, not on a clock.
	changed chan struct{}
	lastID  uint32 // the last id the relay opened
	port    int    // the port the relay said it listens on
	pid     int    // the relay's pid in the pod, as it said

	accept    chan *relayConn
	ready     chan struct{} // closed by the relay's L frame
	readyOnce sync.Once
	done      chan struct{} // closed when the mux ends
	endOnce   sync.Once
	ended     bool  // under mu: set as the mux ends, before done is closed
	err       error // why it ended; valid once done is closed
}

var _ net.Listener = (*relayMux)(nil)

func newRelayMux(w io.Writer) *relayMux {
	return &relayMux{
		w:       w,
		conns:   map[uint32]*relayConn{},
		changed: make(chan struct{}),
		accept:  make(chan *relayConn, relayMaxStreams),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// serve reads the relay's frames from r until the stream ends or breaks the
// protocol, then ends the mux. It never blocks on anything but r: a
// connection that is not read holds at most relayWindow bytes here.
func (m *relayMux) serve(r io.Reader) {
	err := m.read(bufio.NewReaderSize(r, 64<<10))
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errRelayEnded
	}
	m.end(err)
}

func (m *relayMux) read(r io.Reader) error {
	var h [relayHeader]byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return err
		}
		t, id, n := h[0], binary.BigEndian.Uint32(h[1:5]), binary.BigEndian.Uint32(h[5:9])
		if n > relayMaxData {
			return fmt.Errorf("%w: a frame of %d bytes", errRelayProtocol, n)
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return err
		}
		if err := m.handle(t, id, p); err != nil {
			return err
		}
	}
}

// handle acts on one frame of the relay's.
func (m *relayMux) handle(t byte, id uint32, p []byte) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errRelayProtocol}, args...)...)
	}
	switch t {
	case frameListening:
		port, pid, ok := parseListening(string(p))
		if id != 0 || !ok {
			return bad("a bad L frame")
		}
		m.readyOnce.Do(func() {
			m.mu.Lock()
			m.port, m.pid = port, pid
			m.mu.Unlock()
			close(m.ready)
		})
		return nil
	case frameOpen:
		m.mu.Lock()
		defer m.mu.Unlock()
		switch {
		case m.ended:
			return nil // dropped: the mux ended
		case id != m.lastID+1 || len(p) != 0:
			return bad("connection %d opened after %d", id, m.lastID)
		case len(m.conns) >= relayMaxStreams:
			return bad("more than %d connections at once", relayMaxStreams)
		}
		m.lastID = id
		c := newRelayConn(m, id)
		m.conns[id] = c
		m.changedLocked()
		m.accept <- c // never blocks: it holds relayMaxStreams
		return nil
	case frameData, frameEOF, frameClose, frameWindow:
	default:
		return bad("a frame of type %q", t)
	}
	m.mu.Lock()
	c, opened := m.conns[id], id != 0 && id <= m.lastID
	if t == frameClose && c != nil {
		delete(m.conns, id)
		m.changedLocked()
	}
	m.mu.Unlock()
	switch {
	case !opened:
		return bad("a %q frame for connection %d, never opened", t, id)
	case c == nil:
		return nil // closed here: what was in flight is dropped
	}
	switch t {
	case frameData:
		return c.deliver(p)
	case frameEOF:
		if len(p) != 0 {
			return bad("an E frame with a payload")
		}
		c.peerEOF()
	case frameClose:
		c.peerClosed(errRelayClosed)
	case frameWindow:
		if len(p) != 4 {
			return bad("a W frame of %d bytes", len(p))
		}
		return c.credit(binary.BigEndian.Uint32(p))
	}
	return nil
}

// parseListening reads an L frame's payload: "<port> <pid>".
func parseListening(p string) (port, pid int, ok bool) {
	a, b, found := strings.Cut(p, " ")
	port, err1 := strconv.Atoi(a)
	pid, err2 := strconv.Atoi(b)
	return port, pid, found && err1 == nil && err2 == nil && port > 0 && port <= 65535 && pid > 0
}

// Pid is the relay's pid in its pod, as it said once it listened (0
// before).
func (m *relayMux) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pid
}

// errRelayClosed is a connection's error once the relay closed it (its
// client reset it, or sent on a closed socket).
var errRelayClosed = errors.New("connection closed by the egress relay")

// send writes one frame to the relay.
func (m *relayMux) send(t byte, id uint32, p []byte) error {
	b := make([]byte, relayHeader+len(p))
	b[0] = t
	binary.BigEndian.PutUint32(b[1:5], id)
	binary.BigEndian.PutUint32(b[5:9], uint32(len(p)))
	copy(b[relayHeader:], p)
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if isClosed(m.done) {
		return m.err
	}
	if _, err := m.w.Write(b); err != nil {
		m.end(fmt.Errorf("writing to the egress relay: %w", err))
		return m.err
	}
	return nil
}

// end ends the mux once: every connection fails with err, what the relay
// sent on it that no one read is dropped, Accept returns net.ErrClosed, and
// onEnd runs. A connection the relay opens after it is dropped too. So
// nothing of an ended relay is served, even on a connection that reaches
// the proxy afterwards: a session's relay ends at its call's end, before
// the proxy session is cut (sessionEgress.cut).
func (m *relayMux) end(err error) {
	m.endOnce.Do(func() {
		m.mu.Lock()
		m.err = err
		m.ended = true
		conns := m.conns
		m.conns = map[uint32]*relayConn{}
		m.mu.Unlock()
		close(m.done)
		for _, c := range conns {
			c.muxEnded(err)
		}
		if m.onEnd != nil {
			m.onEnd()
		}
	})
}

// Err is why the mux ended: nil while it runs.
func (m *relayMux) Err() error {
	if !isClosed(m.done) {
		return nil
	}
	return m.err
}

// Accept returns the next connection the relay accepted.
func (m *relayMux) Accept() (net.Conn, error) {
	select {
	case c := <-m.accept:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

// Close ends the mux: every connection, and the relay's stream.
func (m *relayMux) Close() error {
	m.end(net.ErrClosed)
	return nil
}

// Addr is where programs connect, in the pod.
func (m *relayMux) Addr() net.Addr { return relayNetAddr(relayAddr) }

// remove forgets connection id, closed here; it reports whether the relay
// had not closed it first (then the relay must be told).
func (m *relayMux) remove(c *relayConn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conns[c.id] != c {
		return false
	}
	delete(m.conns, c.id)
	return true
}

// relayNetAddr is an address in the pod.
type relayNetAddr string

func (relayNetAddr) Network() string  { return "tcp" }
func (a relayNetAddr) String() string { return string(a) }

// relayConn is one connection the relay accepted: a net.Conn with
// deadlines and half-close (CloseWrite), safe for concurrent use.
type relayConn struct {
	m  *relayMux
	id uint32

	wmu sync.Mutex // one Write at a time

	mu      sync.Mutex
	buf     []byte        // received, not yet read
	recvWin int           // bytes the relay may still send
	unacked int           // bytes read and not yet granted back
	sendWin int           // bytes that may still be sent to the relay
	eof     bool          // the relay sends no more
	err     error         // the relay closed it or the mux ended
	wshut   bool          // CloseWrite was called
	closed  bool          // Close was called
	changed chan struct{} // closed and replaced on every change

	rdl, wdl deadline
}

func newRelayConn(m *relayMux, id uint32) *relayConn {
	return &relayConn{m: m, id: id, recvWin: relayWindow, sendWin: relayWindow, changed: make(chan struct{}),
		rdl: makeDeadline(), wdl: makeDeadline()}
}

// signal wakes every waiter; c.mu is held.
func (c *relayConn) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// deliver adds bytes the relay sent; more than the window is an error.
func (c *relayConn) deliver(p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.eof:
		return fmt.Errorf("%w: bytes on connection %d after its end", errRelayProtocol, c.id)
	case len(p) > c.recvWin:
		return fmt.Errorf("%w: %d bytes on connection %d, beyond its window of %d", errRelayProtocol, len(p), c.id, c.recvWin)
	}
	c.recvWin -= len(p)
	c.buf = append(c.buf, p...)
	c.signal()
	return nil
}

func (c *relayConn) peerEOF() {
	c.mu.Lock()
	c.eof = true
	c.signal()
	c.mu.Unlock()
}

// muxEnded ends c with its mux (see relayMux.end): what it holds unread
// is dropped, and Read and Write fail with err.
func (c *relayConn) muxEnded(err error) {
	c.mu.Lock()
	c.buf, c.eof = nil, false
	if c.err == nil {
		c.err = err
	}
	c.signal()
	c.mu.Unlock()
}

func (c *relayConn) peerClosed(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.signal()
	c.mu.Unlock()
}

// credit adds n to what may be sent; the relay never grants more than the
// window.
func (c *relayConn) credit(n uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int64(c.sendWin)+int64(n) > relayWindow {
		return fmt.Errorf("%w: connection %d granted beyond its window", errRelayProtocol, c.id)
	}
	c.sendWin += int(n)
	c.signal()
	return nil
}

// Read reads what the relay sent, and grants the room back.
func (c *relayConn) Read(p []byte) (int, error) {
	for {
		c.mu.Lock()
		switch {
		case c.closed:
			c.mu.Unlock()
			return 0, net.ErrClosed
		case isClosed(c.rdl.wait()):
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case len(p) == 0:
			c.mu.Unlock()
			return 0, nil
		case len(c.buf) > 0:
			n := copy(p, c.buf)
			c.buf = c.buf[n:]
			if len(c.buf) == 0 {
				c.buf = nil
			}
			c.unacked += n
			grant := 0
			if !c.eof && c.err == nil && (c.unacked >= relayWindow/4 || len(c.buf) == 0) {
				grant, c.unacked = c.unacked, 0
				c.recvWin += grant
			}
			c.mu.Unlock()
			if grant > 0 {
				var b [4]byte
				binary.BigEndian.PutUint32(b[:], uint32(grant))
				// A failure ends the mux, which the next call sees.
				_ = c.m.send(frameWindow, c.id, b[:])
			}
			return n, nil
		case c.eof:
			c.mu.Unlock()
			return 0, io.EOF
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-c.rdl.wait():
		}
	}
}

// Write sends p to the relay, as the relay grants room for it.
func (c *relayConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	total := 0
	for len(p) > 0 {
		c.mu.Lock()
		var err error
		switch {
		case c.closed:
			err = net.ErrClosed
		case c.wshut:
			err = errors.New("write after CloseWrite")
		case c.err != nil:
			err = c.err
		case isClosed(c.wdl.wait()):
			err = os.ErrDeadlineExceeded
		}
		if err != nil {
			c.mu.Unlock()
			return total, err
		}
		k := min(len(p), c.sendWin, relayMaxData)
		if k == 0 {
			changed := c.changed
			c.mu.Unlock()
			select {
			case <-changed:
			case <-c.wdl.wait():
			}
			continue
		}
		c.sendWin -= k
		c.mu.Unlock()
		if err := c.m.send(frameData, c.id, p[:k]); err != nil {
			return total, err
		}
		total += k
		p = p[k:]
	}
	return total, nil
}

// CloseWrite tells the relay that nothing more will be sent: its client
// reads the end of the stream.
func (c *relayConn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.closed || c.wshut || c.err != nil {
		c.mu.Unlock()
		return nil
	}
	c.wshut = true
	c.mu.Unlock()
	return c.m.send(frameEOF, c.id, nil)
}

// Close ends the connection: the relay writes out what it holds of it and
// closes its client's socket. It is safe to call more than once.
func (c *relayConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.buf = nil
	c.signal()
	c.mu.Unlock()
	if c.m.remove(c) {
		_ = c.m.send(frameClose, c.id, nil)
	}
	return nil
}

func (c *relayConn) LocalAddr() net.Addr  { return relayNetAddr(relayAddr) }
func (c *relayConn) RemoteAddr() net.Addr { return relayNetAddr(relayHost + ":0") }

func (c *relayConn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}
func (c *relayConn) SetReadDeadline(t time.Time) error  { c.rdl.set(t); return nil }
func (c *relayConn) SetWriteDeadline(t time.Time) error { c.wdl.set(t); return nil }

// deadline is a deadline whose passing closes a channel, as net.Pipe's
// connections have.
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	cancel chan struct{} // closed once the deadline passed
}

func makeDeadline() deadline { return deadline{cancel: make(chan struct{})} }

// set sets the deadline; the zero time means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer fired: wait until it closed cancel
	}
	d.timer = nil
	passed := isClosed(d.cancel)
	if t.IsZero() {
		if passed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if passed {
			d.cancel = make(chan struct{})
		}
		cancel := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(cancel) })
		return
	}
	if !passed {
		close(d.cancel)
	}
}

// wait returns a channel closed once the deadline passed.
func (d *deadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}

// changedLocked tells the waiters on changed that conns changed; m.mu is
// held.
func (m *relayMux) changedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}
