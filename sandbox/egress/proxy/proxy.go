// Package proxy is codeexec's egress proxy: the only way a sandboxed run
// reaches the network when CODE_EXEC_NETWORK=allowlist. What a run may reach
// (the allowlist, the address rules, the report) is package egress; this
// package serves it over HTTP.
//
// A Proxy holds the operator's egress.Policy. Each run gets a Session of its
// own, served on a listener that only that run can reach, so the proxy knows which
// run every connection belongs to without credentials. The session forwards
// plain HTTP requests (absolute http:// URLs) and tunnels CONNECT requests
// (TLS passes through untouched: the proxy never sees inside it). Before it
// connects anywhere it checks the destination against the allowlist,
// resolves the name itself, refuses loopback, private, link-local and other
// internal addresses unless the policy allows private addresses, and dials
// the address it checked, so that a name cannot resolve differently between
// the check and the connection. Closing the session ends every connection
// of the run and returns its egress.Report.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codeexec/codeexec/sandbox/egress"
)

// Proxy serves the policy to runs. It holds no connection itself: each run's
// Session does. It is safe for concurrent use.
type Proxy struct {
	policy egress.Policy
	log    *slog.Logger
	// dialer connects to a checked address; replaced in tests.
	dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// New returns a Proxy for the policy. log may be nil.
func New(p egress.Policy, log *slog.Logger) *Proxy {
	if p.Allow == nil {
		p.Allow = &egress.Allowlist{}
	}
	if p.Resolver == nil {
		p.Resolver = egress.SystemResolver()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &net.Dialer{}
	return &Proxy{policy: p, log: log, dialer: d.DialContext}
}

// Policy returns the proxy's policy.
func (p *Proxy) Policy() egress.Policy { return p.policy }

// Session is one run's proxy. Close it when the run ends.
type Session struct {
	p         *Proxy
	id        string
	srv       *http.Server
	transport *http.Transport
	served    chan struct{}

	// narrow, when set, is the run's own allowlist (Restrict): a
	// destination must be on it too.
	narrow atomic.Pointer[egress.Allowlist]

	// l is the listener the session serves, as its server sees it.
	l *listener
	// acceptMu is held while a connection is taken off the listener and
	// registered (listener.Accept), and while Cut empties the listener's
	// queue and starts the next part: so a connection is either taken
	// before the cut, and closed by it, or after it.
	acceptMu sync.Mutex

	mu     sync.Mutex
	closed bool
	// conns are the session's connections: the clients' (from the
	// listener, including hijacked ones) and the upstream ones, each with
	// the part it was opened in.
	conns     map[net.Conn]*part
	cur       *part          // the part that runs now
	work      sync.WaitGroup // handlers and tunnels in flight
	report    *egress.Report
	stopIdle  chan struct{}
	closeOnce sync.Once
}

// part is what one run of a session that Cut divides (or the only run of
// one that it does not) has of it: what it reached and was refused, and
// its caps. A connection, and every request read from it, belongs to the
// part in which the listener gave it: what a request of an ended part
// still does (a handler that was resolving, a dial that the transport
// finishes for it) is recorded in that part, which no report reads any
// more, and it connects nowhere (see current).
type part struct {
	rec   recorder
	dials int // under Session.mu
	bytes atomic.Int64
}

// partKey is the context key of the part of a request (see Serve's
// ConnContext).
type partKey struct{}

// partOf returns the part that ctx's request belongs to, nil when none.
func partOf(ctx context.Context) *part {
	p, _ := ctx.Value(partKey{}).(*part)
	return p
}

// Serve starts serving one run on l and takes ownership of l: Close closes
// it. id names the run in logs.
func (p *Proxy) Serve(id string, l net.Listener) *Session {
	return p.serve(id, l, nil)
}

// serve is Serve; a gate, when not nil, holds each Accept of the session's
// server until it can receive from it (tests).
func (p *Proxy) serve(id string, l net.Listener, gate <-chan struct{}) *Session {
	s := &Session{
		p:        p,
		id:       id,
		conns:    map[net.Conn]*part{},
		cur:      &part{},
		served:   make(chan struct{}),
		stopIdle: make(chan struct{}),
	}
	s.l = newListener(s, l, gate)
	s.transport = &http.Transport{
		Proxy:                 nil, // never a proxy of our own
		DialContext:           s.dialContext,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       p.policy.Caps.IdleTimeout,
		ResponseHeaderTimeout: 0,
		DisableCompression:    true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The inbound URL is absolute and already names the
			// destination; X-Forwarded-* were stripped.
			pr.Out.Host = pr.In.Host
		},
		Transport:    s.transport,
		ErrorHandler: s.writeError,
		ErrorLog:     slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	s.srv = &http.Server{
		Handler:           s.handler(rp),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       p.policy.Caps.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		// Every request of a connection belongs to the part in which
		// the listener gave the connection (listener.Accept).
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			s.mu.Lock()
			pt := s.conns[c]
			s.mu.Unlock()
			if pt == nil {
				pt = &part{} // closed already: an ended part
			}
			return context.WithValue(ctx, partKey{}, pt)
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				s.untrack(c)
			}
			// A hijacked connection stays: its tunnel (connect)
			// untracks it once it ends.
		},
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(s.l)
	}()
	if t := p.policy.Caps.IdleTimeout; t > 0 {
		go s.reapIdle(t)
	}
	return s
}

// Restrict narrows what the session's run may reach to the destinations
// that are on both the proxy's allowlist and a: an empty a refuses every
// destination; nil leaves the proxy's allowlist alone. A mode calls it
// when it hands a run (or a session) its proxy session, before the
// program starts, with sandbox.Request.Network. It is safe to call at any
// time; a later call replaces the earlier one's narrowing.
func (s *Session) Restrict(a *egress.Allowlist) {
	s.narrow.Store(a)
}

// Close stops the session: it closes the listener and every connection of
// the run, waits for them to end and returns the run's report. It is safe
// to call more than once; later calls return the same report.
func (s *Session) Close() *egress.Report {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		conns := make([]net.Conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		close(s.stopIdle)
		_ = s.srv.Close()
		for _, c := range conns {
			_ = c.Close()
		}
		s.transport.CloseIdleConnections()
		<-s.served
		s.work.Wait()
		s.transport.CloseIdleConnections()
		s.mu.Lock()
		cur := s.cur
		s.mu.Unlock()
		s.report = cur.rec.report()
	})
	return s.report
}

// Cut ends the part of the session that one run had, for a session that
// serves several runs in turn (the calls of a codeexec session, whose
// sandbox, and so its listener, lives across them): it closes every
// connection still open, so that none outlives the run that opened it,
// returns the report of what was reached and refused since Serve or the
// last Cut, and counts the caps on connections and bytes afresh. After
// Close it returns an empty report.
//
// Once Cut returns, nothing that the ended run connected or sent is
// forwarded, nor charged to the next part; the caller cuts once nothing
// of the run runs any more (its processes are gone), so that every
// connection the run made is one of these:
//   - a connection that the server took from the listener: closed here,
//     with its requests, read or not (a request read before the cut keeps
//     its part: what its handler still does is refused, see current);
//   - a connection still queued on the listener, not yet accepted: taken
//     off the queue here and closed (listener.drain), under acceptMu, so
//     that the server's Accept cannot take it meanwhile and give it to
//     the next part;
//   - an upstream connection, or a tunnel's: closed here.
//
// A listener that cannot be emptied without blocking (one that is neither
// a *net.TCPListener nor a *net.UnixListener, as kubernetes mode's relay
// listener, or on a system that is not unix) keeps its queue: a connection
// still in it is given to the next part. Nor can the proxy tell when a
// relay in the sandbox (docker and kubernetes modes) connects, after the
// cut, for a connection that it took before it. So those modes end a
// session's relay with its call, before they cut: docker mode kills it
// before the call's end is known; kubernetes mode also ends its stream,
// and with it every connection of the relay and what they held, so that
// such a connection gives the next part nothing to serve.
func (s *Session) Cut() *egress.Report {
	s.acceptMu.Lock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.acceptMu.Unlock()
		return &egress.Report{Reached: []egress.Reached{}, Refused: []egress.Refused{}}
	}
	// The next part begins before the queue is emptied (the server takes
	// nothing meanwhile: acceptMu), and closing a queued connection needs
	// no part.
	ended := s.cur
	s.cur = &part{}
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.l.drain()
	s.acceptMu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	s.transport.CloseIdleConnections()
	return ended.rec.report()
}

// begin registers a unit of work; it fails once the session is closed.
func (s *Session) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.work.Add(1)
	return true
}

// track registers c as a connection of part pt; it fails once the session
// is closed, or pt has ended.
func (s *Session) track(c net.Conn, pt *part) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || pt != s.cur {
		return false
	}
	s.conns[c] = pt
	return true
}

// current reports whether pt is the part that runs now (not an ended one).
// A request of an ended part (read from its connection before the cut, or
// a dial that the transport finishes for it after its handler has gone)
// connects nowhere: takeConnection and track check it.
func (s *Session) current(pt *part) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && pt == s.cur
}

func (s *Session) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Session) handler(rp http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.begin() {
			http.Error(w, "codeexec egress: the run has ended", http.StatusServiceUnavailable)
			return
		}
		defer s.work.Done()
		if pt := partOf(r.Context()); pt == nil || !s.current(pt) {
			// Read from a connection of a part that has ended.
			http.Error(w, "codeexec egress: the run has ended", http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodConnect {
			s.connect(w, r)
			return
		}
		if r.URL.Scheme != "http" || r.URL.Host == "" {
			err := fmt.Errorf("%w: the proxy forwards absolute http:// URLs and CONNECT tunnels, not %q", egress.ErrBadRequest, r.RequestURI)
			partOf(r.Context()).rec.refuse(r.Host, 0, err)
			s.writeError(w, r, err)
			return
		}
		rp.ServeHTTP(w, r)
	})
}

// connect serves a CONNECT request: it dials the destination, then copies
// bytes both ways without looking at them.
func (s *Session) connect(w http.ResponseWriter, r *http.Request) {
	up, err := s.dial(r.Context(), r.Host)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	if !s.track(client, partOf(r.Context())) {
		_ = client.Close()
		_ = up.Close()
		return
	}
	_ = client.SetDeadline(time.Time{}) // the server's header deadline
	defer func() {
		s.untrack(client)
		_ = client.Close()
		_ = up.Close()
	}()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var from io.Reader = client
	if n := brw.Reader.Buffered(); n > 0 {
		// Bytes the client sent right after its request (a TLS hello).
		from = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), client)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, from)
		closeWrite(up)
	}()
	_, _ = io.Copy(client, up)
	closeWrite(client)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// writeError answers a request the proxy could not forward.
func (s *Session) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusBadGateway
	switch egress.ReasonOf(err) {
	case egress.ReasonNotAllowed, egress.ReasonPort, egress.ReasonPrivateAddress:
		code = http.StatusForbidden
	case egress.ReasonCap:
		code = http.StatusTooManyRequests
	case egress.ReasonBadRequest:
		code = http.StatusBadRequest
	case egress.ReasonUnreachable:
		if errors.Is(err, context.DeadlineExceeded) {
			code = http.StatusGatewayTimeout
		}
	}
	s.p.log.Debug("egress refused", "run", s.id, "target", r.Host, "err", err)
	http.Error(w, "codeexec egress: "+err.Error(), code)
}

func (s *Session) dialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	return s.dial(ctx, addr)
}

// dial checks hostport against the policy, resolves it and connects to the
// first permitted address that answers. Every outcome is recorded.
//
// The outcome is recorded in the part of ctx's request (the transport's
// dial keeps the request's context values): a dial of a part that has
// ended connects nowhere.
func (s *Session) dial(ctx context.Context, hostport string) (net.Conn, error) {
	pt := partOf(ctx)
	if pt == nil {
		return nil, fmt.Errorf("%w: the run has ended", egress.ErrUnreachable)
	}
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		err = fmt.Errorf("%w: bad destination %q", egress.ErrBadRequest, hostport)
		pt.rec.refuse(hostport, 0, err)
		return nil, err
	}
	host = egress.NormalizeHost(host)
	port, err := egress.ParsePort(portStr)
	if err != nil {
		err = fmt.Errorf("%w: bad destination %q", egress.ErrBadRequest, hostport)
		pt.rec.refuse(host, 0, err)
		return nil, err
	}
	conn, err := s.dialChecked(ctx, pt, host, port)
	if err != nil {
		pt.rec.refuse(host, port, err)
		return nil, err
	}
	return conn, nil
}

func (s *Session) dialChecked(ctx context.Context, pt *part, host string, port int) (net.Conn, error) {
	pol := s.p.policy
	if err := pol.Allow.Check(host, port); err != nil {
		return nil, err
	}
	if narrow := s.narrow.Load(); narrow != nil {
		if err := narrow.Check(host, port); err != nil {
			return nil, fmt.Errorf("%w (this run's own allowlist is narrower than the server's)", err)
		}
	}
	if err := s.takeConnection(pt); err != nil {
		return nil, err
	}
	if t := pol.Caps.ConnectTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	addrs, err := s.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var permittedAddrs []netip.Addr
	var refusedWhy []string
	for _, a := range addrs {
		if ok, class := egress.Permitted(a, pol.AllowPrivate); ok {
			permittedAddrs = append(permittedAddrs, a)
		} else {
			refusedWhy = append(refusedWhy, a.String()+" is "+class)
		}
	}
	if len(permittedAddrs) == 0 {
		return nil, fmt.Errorf("%w: %s", egress.ErrPrivateAddress, strings.Join(refusedWhy, ", "))
	}
	var errs []error
	for _, a := range permittedAddrs {
		if !s.current(pt) {
			// The part ended while this resolved (or an address
			// before failed): no connection for it.
			return nil, fmt.Errorf("%w: the run has ended", egress.ErrUnreachable)
		}
		addr := netip.AddrPortFrom(a, uint16(port)).String()
		c, err := s.p.dialer(ctx, "tcp", addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		mc := &meteredConn{Conn: c, s: s, part: pt, entry: pt.rec.reach(host, port, a.String()), host: host, port: port}
		mc.touch()
		if !s.track(mc, pt) {
			// Ended meanwhile: nothing was sent on c, and its part's
			// report (which recorded it) is no one's any more.
			_ = c.Close()
			return nil, fmt.Errorf("%w: the run has ended", egress.ErrUnreachable)
		}
		return mc, nil
	}
	return nil, fmt.Errorf("%w: %w", egress.ErrUnreachable, errors.Join(errs...))
}

func (s *Session) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	addrs, err := s.p.policy.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", egress.ErrUnresolved, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: no address for %s", egress.ErrUnresolved, host)
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}

// takeConnection counts a new connection of part pt against its caps; it
// fails once pt has ended.
func (s *Session) takeConnection(pt *part) error {
	caps := s.p.policy.Caps
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || pt != s.cur {
		return fmt.Errorf("%w: the run has ended", egress.ErrUnreachable)
	}
	if caps.Bytes > 0 && pt.bytes.Load() >= caps.Bytes {
		return fmt.Errorf("%w: %d bytes", egress.ErrCap, caps.Bytes)
	}
	if caps.Connections > 0 && pt.dials >= caps.Connections {
		return fmt.Errorf("%w: %d connections", egress.ErrCap, caps.Connections)
	}
	pt.dials++
	return nil
}

// reapIdle closes upstream connections on which nothing moved for t.
func (s *Session) reapIdle(t time.Duration) {
	tick := min(max(t/4, 10*time.Millisecond), time.Second)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-s.stopIdle:
			return
		case <-tk.C:
		}
		deadline := time.Now().Add(-t).UnixNano()
		s.mu.Lock()
		var idle []net.Conn
		for c := range s.conns {
			if mc, ok := c.(*meteredConn); ok && mc.last.Load() < deadline {
				idle = append(idle, mc)
			}
		}
		s.mu.Unlock()
		for _, c := range idle {
			_ = c.Close()
		}
	}
}

// meteredConn is a connection to a destination: it counts bytes against the
// run's cap and the destination's report entry, and notes its last activity.
type meteredConn struct {
	net.Conn
	s      *Session
	part   *part
	entry  *reachedEntry
	host   string
	port   int
	last   atomic.Int64
	capHit atomic.Bool
	closed atomic.Bool
}

func (c *meteredConn) touch() { c.last.Store(time.Now().UnixNano()) }

// room returns how many of n bytes the byte cap still allows.
func (c *meteredConn) room(n int) (int, error) {
	limit := c.s.p.policy.Caps.Bytes
	if limit <= 0 {
		return n, nil
	}
	left := limit - c.part.bytes.Load()
	if left <= 0 {
		if !c.capHit.Swap(true) {
			c.part.rec.refuse(c.host, c.port, fmt.Errorf("%w: %d bytes", egress.ErrCap, limit))
		}
		_ = c.Close()
		return 0, fmt.Errorf("%w: %d bytes", egress.ErrCap, limit)
	}
	return int(min(int64(n), left)), nil
}

func (c *meteredConn) Read(p []byte) (int, error) {
	k, err := c.room(len(p))
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p[:k])
	c.count(n, &c.entry.received)
	return n, err
}

func (c *meteredConn) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		k, err := c.room(len(p))
		if err != nil {
			return total, err
		}
		n, err := c.Conn.Write(p[:k])
		c.count(n, &c.entry.sent)
		total += n
		if err != nil {
			return total, err
		}
		p = p[n:]
	}
	return total, nil
}

func (c *meteredConn) count(n int, dir *atomic.Int64) {
	if n > 0 {
		c.part.bytes.Add(int64(n))
		dir.Add(int64(n))
		c.touch()
	}
}

func (c *meteredConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

func (c *meteredConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.s.untrack(c)
	return c.Conn.Close()
}
