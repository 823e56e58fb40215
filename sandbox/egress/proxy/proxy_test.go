package proxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
)

// Every destination in these tests is a listener the test starts on
// loopback, reached through names pinned to 127.0.0.1; no test asks DNS.

func port(t *testing.T, rawURL string) int {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type fixture struct {
	proxy   *proxy.Proxy
	session *proxy.Session
	addr    string // the session's listener
	http    *httptest.Server
	tls     *httptest.Server
	hport   int
	tport   int
	// late counts the requests for /late that reached the HTTP server.
	late atomic.Int64
	// hold, set by newFixture's edit, holds the session's server off its
	// listener until release is called (see proxy.ServeHeld).
	hold    bool
	release func()
}

// newFixture starts an HTTP and an HTTPS server on loopback and a session
// whose allowlist names allowed.test on their two ports; edit may change the
// policy.
func newFixture(t *testing.T, edit func(p *egress.Policy, f *fixture)) *fixture {
	t.Helper()
	f := &fixture{}
	f.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/late" {
			f.late.Add(1)
		}
		if r.URL.Path == "/big" {
			_, _ = w.Write([]byte(strings.Repeat("x", 1<<20)))
			return
		}
		fmt.Fprintf(w, "plain %s host=%s xff=%q proxy-auth=%q", r.URL.Path, r.Host, r.Header.Get("X-Forwarded-For"), r.Header.Get("Proxy-Authorization"))
	}))
	t.Cleanup(f.http.Close)
	f.tls = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %s", r.URL.Path)
	}))
	t.Cleanup(f.tls.Close)
	f.hport, f.tport = port(t, f.http.URL), port(t, f.tls.URL)

	allow, err := egress.ParseAllowlist([]string{
		"allowed.test:" + strconv.Itoa(f.hport),
		"allowed.test:" + strconv.Itoa(f.tport),
		"private.test:" + strconv.Itoa(f.hport),
	})
	if err != nil {
		t.Fatal(err)
	}
	pins, err := egress.ParsePins("allowed.test=127.0.0.1,private.test=127.0.0.1,notlisted.test=127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pol := egress.Policy{
		Allow:        allow,
		AllowPrivate: true,
		Resolver:     pins,
		Caps:         egress.Caps{Connections: 20, Bytes: 8 << 20, ConnectTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second},
	}
	if edit != nil {
		edit(&pol, f)
	}
	f.proxy = proxy.New(pol, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	if f.hold {
		f.session, f.release = f.proxy.ServeHeld("test-run", l)
		t.Cleanup(f.release)
	} else {
		f.session = f.proxy.Serve("test-run", l)
	}
	t.Cleanup(func() { f.session.Close() })
	return f
}

// client returns an HTTP client that uses the session as its proxy and
// trusts the TLS server's certificate under the name allowed.test.
// dial connects to the session's listener as a program would; the
// connection is closed when the test ends.
func (f *fixture) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (f *fixture) client() *http.Client {
	pool := f.tls.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: f.addr}),
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
		},
	}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestForwardsPlainHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://allowed.test:%d/hello", f.hport), nil)
	req.Header.Set("X-Forwarded-For", "10.9.9.9")
	resp, err := f.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("plain /hello host=allowed.test:%d xff=\"\" proxy-auth=\"\"", f.hport)
	if resp.StatusCode != 200 || string(b) != want {
		t.Fatalf("GET = %d %q, want 200 %q", resp.StatusCode, b, want)
	}
	rep := f.session.Close()
	if len(rep.Reached) != 1 || len(rep.Refused) != 0 {
		t.Fatalf("report = %+v", rep)
	}
	r := rep.Reached[0]
	if r.Host != "allowed.test" || r.Port != f.hport || r.Address != "127.0.0.1" || r.Connections != 1 || r.BytesSent == 0 || r.BytesReceived == 0 {
		t.Fatalf("reached = %+v", r)
	}
}

func TestTunnelsTLSWithoutInterception(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	code, body := get(t, f.client(), fmt.Sprintf("https://allowed.test:%d/secret", f.tport))
	if code != 200 || body != "tls /secret" {
		t.Fatalf("GET over CONNECT = %d %q", code, body)
	}
	rep := f.session.Close()
	if len(rep.Reached) != 1 || rep.Reached[0].Port != f.tport || rep.Reached[0].Host != "allowed.test" {
		t.Fatalf("report = %+v", rep)
	}
}

// connect sends a raw CONNECT and returns the proxy's status code.
func connect(t *testing.T, proxyAddr, target string) int {
	t.Helper()
	c, _, code := tunnel(t, proxyAddr, target)
	c.Close()
	return code
}

// tunnel sends a CONNECT for target to the proxy and returns the
// connection, its reader past the response, and the response's status.
func tunnel(t *testing.T, proxyAddr, target string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if err := req.Write(c); err != nil {
		c.Close()
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	resp.Body.Close()
	return c, br, resp.StatusCode
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *egress.Policy, f *fixture) { p.AllowPrivate = false })
	c := f.client()
	tests := []struct {
		name   string
		do     func() int
		host   string
		port   int
		reason egress.Reason
		status int
	}{
		{"not on the list over HTTP", func() int {
			code, _ := get(t, c, fmt.Sprintf("http://notlisted.test:%d/", f.hport))
			return code
		}, "notlisted.test", f.hport, egress.ReasonNotAllowed, 403},
		{"wrong port over CONNECT", func() int {
			return connect(t, f.addr, "allowed.test:"+strconv.Itoa(f.hport+1))
		}, "allowed.test", f.hport + 1, egress.ReasonPort, 403},
		{"private address", func() int {
			code, _ := get(t, c, fmt.Sprintf("http://private.test:%d/", f.hport))
			return code
		}, "private.test", f.hport, egress.ReasonPrivateAddress, 403},
		{"address literal not on the list", func() int {
			return connect(t, f.addr, "127.0.0.1:"+strconv.Itoa(f.tport))
		}, "127.0.0.1", f.tport, egress.ReasonNotAllowed, 403},
	}
	for _, tt := range tests {
		if got := tt.do(); got != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.status)
		}
	}
	rep := f.session.Close()
	if len(rep.Reached) != 0 {
		t.Fatalf("reached = %+v, want nothing", rep.Reached)
	}
	if len(rep.Refused) != len(tests) {
		t.Fatalf("refused = %+v, want %d entries", rep.Refused, len(tests))
	}
	for i, tt := range tests {
		r := rep.Refused[i]
		if r.Host != tt.host || r.Port != tt.port || r.Reason != tt.reason || r.Count != 1 {
			t.Errorf("%s: refused = %+v, want %s:%d %s", tt.name, r, tt.host, tt.port, tt.reason)
		}
	}
	if d := rep.Refused[2].Detail; !strings.Contains(d, "127.0.0.1 is loopback") {
		t.Errorf("private refusal detail = %q, want the address and its class", d)
	}
}

// Cloud metadata is one of the private classes (SPEC, "Network"): refused,
// and named, unless the operator allows private addresses.
func TestMetadataRefusedUnlessPrivateAllowed(t *testing.T) {
	t.Parallel()
	for _, allowPrivate := range []bool{false, true} {
		var dialled []string
		f := newFixture(t, func(p *egress.Policy, f *fixture) {
			p.Allow, _ = egress.ParseAllowlist([]string{"meta.test", "169.254.169.254"})
			p.Resolver = egress.Pins{"meta.test": {netip.MustParseAddr("169.254.169.254")}}
			p.AllowPrivate = allowPrivate
		})
		// The test dialer records and refuses: no traffic leaves the machine.
		f.proxy.SetDialer(func(_ context.Context, _, addr string) (net.Conn, error) {
			dialled = append(dialled, addr)
			return nil, errors.New("test dialer: no traffic")
		})
		for _, target := range []string{"meta.test:80", "169.254.169.254:80"} {
			if code := connect(t, f.addr, target); code < 400 {
				t.Errorf("allowPrivate=%v: CONNECT %s = %d, want an error (refused, or the test dialer's failure)", allowPrivate, target, code)
			}
		}
		rep := f.session.Close()
		if allowPrivate {
			if len(dialled) != 2 {
				t.Errorf("with private addresses allowed the proxy dialled %v, want both targets", dialled)
			}
			continue
		}
		if len(dialled) != 0 {
			t.Fatalf("dialled %v", dialled)
		}
		if len(rep.Refused) != 2 || rep.Refused[0].Reason != egress.ReasonPrivateAddress || !strings.Contains(rep.Refused[0].Detail, "cloud metadata") {
			t.Fatalf("refused = %+v", rep.Refused)
		}
	}
}

func TestUnpinnedNameIsUnresolvedWithoutDNS(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *egress.Policy, f *fixture) {
		p.Allow, _ = egress.ParseAllowlist([]string{"unpinned.test"})
	})
	if code := connect(t, f.addr, "unpinned.test:443"); code != 502 {
		t.Fatalf("CONNECT = %d, want 502", code)
	}
	rep := f.session.Close()
	if len(rep.Refused) != 1 || rep.Refused[0].Reason != egress.ReasonUnresolved {
		t.Fatalf("refused = %+v", rep.Refused)
	}
}

// The proxy resolves once and dials what it checked: a resolver that
// answers differently on a second question cannot steer the connection.
func TestDialsTheCheckedAddress(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	var dialled []string
	f := newFixture(t, func(p *egress.Policy, f *fixture) {
		p.AllowPrivate = false
		p.Allow, _ = egress.ParseAllowlist([]string{"rebind.test"})
		p.Resolver = resolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				// A global address and a loopback one: only the
				// first may be dialled.
				return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("93.184.216.34")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		})
	})
	f.proxy.SetDialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		// Stand in for 93.184.216.34 with the test's own listener.
		var d net.Dialer
		return d.DialContext(ctx, network, f.http.Listener.Addr().String())
	})
	code, _ := get(t, f.client(), "http://rebind.test/x")
	rep := f.session.Close()
	if code != 200 {
		t.Fatalf("GET = %d", code)
	}
	if calls != 1 || len(dialled) != 1 || dialled[0] != "93.184.216.34:80" {
		t.Fatalf("resolver calls = %d, dialled = %v; want one call and 93.184.216.34:80", calls, dialled)
	}
	if len(rep.Reached) != 1 || rep.Reached[0].Address != "93.184.216.34" {
		t.Fatalf("reached = %+v", rep.Reached)
	}
}

func TestConnectionCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *egress.Policy, f *fixture) { p.Caps.Connections = 2 })
	target := "allowed.test:" + strconv.Itoa(f.hport)
	codes := []int{connect(t, f.addr, target), connect(t, f.addr, target), connect(t, f.addr, target)}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("CONNECT codes = %v, want 200 200 429", codes)
	}
	rep := f.session.Close()
	if len(rep.Reached) != 1 || rep.Reached[0].Connections != 2 {
		t.Fatalf("reached = %+v", rep.Reached)
	}
	if len(rep.Refused) != 1 || rep.Refused[0].Reason != egress.ReasonCap {
		t.Fatalf("refused = %+v", rep.Refused)
	}
}

func TestByteCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *egress.Policy, f *fixture) { p.Caps.Bytes = 64 << 10 })
	code, body := get(t, f.client(), fmt.Sprintf("http://allowed.test:%d/big", f.hport))
	if code == 200 && len(body) >= 1<<20 {
		t.Fatalf("the whole megabyte came through a 64 KiB cap")
	}
	rep := f.session.Close()
	if len(rep.Reached) != 1 {
		t.Fatalf("reached = %+v", rep.Reached)
	}
	if got := rep.Reached[0].BytesSent + rep.Reached[0].BytesReceived; got > 64<<10 {
		t.Fatalf("%d bytes moved, cap 64 KiB", got)
	}
	if len(rep.Refused) != 1 || rep.Refused[0].Reason != egress.ReasonCap {
		t.Fatalf("refused = %+v, want the byte cap", rep.Refused)
	}
}

func TestIdleTunnelIsClosed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *egress.Policy, f *fixture) { p.Caps.IdleTimeout = 100 * time.Millisecond })
	c := f.dial(t)
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", f.tport, f.tport)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %v, %v", resp, err)
	}
	// The proxy closes it (100ms after the last byte); the deadline only
	// bounds a tunnel that is never closed.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("read a byte from an idle tunnel")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the idle tunnel stayed open: %v", err)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	// A request sent to the proxy as if it were a web server.
	code, _ := get(t, http.DefaultClient, "http://"+f.addr+"/")
	if code != 400 {
		t.Fatalf("direct GET = %d, want 400", code)
	}
	if code := connect(t, f.addr, "allowed.test"); code != 400 {
		t.Fatalf("CONNECT without port = %d, want 400", code)
	}
	rep := f.session.Close()
	if len(rep.Refused) != 2 || rep.Refused[0].Reason != egress.ReasonBadRequest || rep.Refused[1].Reason != egress.ReasonBadRequest {
		t.Fatalf("refused = %+v", rep.Refused)
	}
}

func TestCloseEndsTunnelsAndIsIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c := f.dial(t)
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: x\r\n\r\n", f.tport)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %v, %v", resp, err)
	}
	done := make(chan *egress.Report)
	go func() { done <- f.session.Close() }()
	select {
	case rep := <-done:
		if len(rep.Reached) != 1 {
			t.Fatalf("report = %+v", rep)
		}
		if again := f.session.Close(); again != rep {
			t.Fatal("second Close returned another report")
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not end the open tunnel")
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("tunnel still open after Close")
	}
	if _, err := net.DialTimeout("tcp", f.addr, time.Second); err == nil {
		t.Fatal("listener still accepts after Close")
	}
}

func TestReportAggregatesAndBounds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *egress.Policy, f *fixture) { p.Caps.Connections = 0 })
	for i := 0; i < 3; i++ {
		connect(t, f.addr, "notlisted.test:443")
	}
	for i := 0; i < egress.MaxReportEntries+5; i++ {
		connect(t, f.addr, fmt.Sprintf("n%d.test:443", i))
	}
	rep := f.session.Close()
	if rep.Refused[0].Host != "notlisted.test" || rep.Refused[0].Count != 3 {
		t.Fatalf("first refusal = %+v, want notlisted.test three times", rep.Refused[0])
	}
	if len(rep.Refused) != egress.MaxReportEntries || rep.Omitted != 6 {
		t.Fatalf("%d refusals, %d omitted; want %d and 6", len(rep.Refused), rep.Omitted, egress.MaxReportEntries)
	}
}

// The destination is the request's URL: a Host header that names another
// site does not reach the upstream, so a program cannot pick a virtual host
// the allowlist does not name on an allowed address.
func TestHostHeaderCannotChooseAnotherSite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c := f.dial(t)
	fmt.Fprintf(c, "GET http://allowed.test:%d/h HTTP/1.1\r\nHost: notlisted.test\r\nConnection: close\r\n\r\n", f.hport)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("host=allowed.test:%d", f.hport); resp.StatusCode != 200 || !strings.Contains(string(b), want) {
		t.Fatalf("GET = %d %q, want 200 and %s", resp.StatusCode, b, want)
	}
}

// resolverFunc makes a function an egress.Resolver.
type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// A session that serves several runs in turn (the calls of a codeexec
// session) cuts between them: each part has its own report and its own
// caps, and no connection outlives the part that opened it.
func TestCutGivesEachRunItsReportAndCaps(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *egress.Policy, f *fixture) { p.Caps.Connections = 1 })
	target := "allowed.test:" + strconv.Itoa(f.hport)
	if codes := []int{connect(t, f.addr, target), connect(t, f.addr, "notlisted.test:80")}; codes[0] != 200 || codes[1] == 200 {
		t.Fatalf("first part: CONNECT codes = %v", codes)
	}
	rep := f.session.Cut()
	if len(rep.Reached) != 1 || rep.Reached[0].Connections != 1 {
		t.Fatalf("first part reached = %+v", rep.Reached)
	}
	if len(rep.Refused) != 1 || rep.Refused[0].Host != "notlisted.test" || rep.Refused[0].Reason != egress.ReasonNotAllowed {
		t.Fatalf("first part refused = %+v", rep.Refused)
	}
	// The cap of one connection counts afresh; the tunnel stays open
	// until the cut.
	c, br, code := tunnel(t, f.addr, target)
	defer c.Close()
	if code != 200 {
		t.Fatalf("second part: CONNECT = %d, want 200 (the cap counts afresh)", code)
	}
	rep = f.session.Cut()
	if len(rep.Reached) != 1 || rep.Reached[0].Connections != 1 || len(rep.Refused) != 0 {
		t.Fatalf("second part = %+v", rep)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset") {
		t.Fatalf("the tunnel outlived the cut: read err = %v", err)
	}
	if rep := f.session.Cut(); !rep.Empty() {
		t.Fatalf("a part with nothing = %+v", rep)
	}
	if rep := f.session.Close(); !rep.Empty() {
		t.Fatalf("after the cuts, Close = %+v", rep)
	}
	if rep := f.session.Cut(); rep == nil || !rep.Empty() {
		t.Fatalf("Cut after Close = %+v", rep)
	}
}

// lateRequest is a request for /late on the HTTP server through the
// session, without its last line end.
func (f *fixture) lateRequest() string {
	return fmt.Sprintf("GET http://allowed.test:%d/late HTTP/1.1\r\nHost: allowed.test\r\n", f.hport)
}

// checkNothingAfterCut checks, on the connection c (read with br) of a part
// that has been cut, that no response comes (its request was not
// forwarded), and, once the session is closed, that the next part was
// charged nothing and that no request for /late reached the HTTP server.
func (f *fixture) checkNothingAfterCut(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // a hang fails, not a bound
	if resp, err := http.ReadResponse(br, nil); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Errorf("a request of the ended part was forwarded after the cut: %s %q", resp.Status, b)
	}
	if rep := f.session.Close(); !rep.Empty() {
		t.Errorf("the next part was charged the ended part's traffic: %+v", rep)
	}
	if n := f.late.Load(); n != 0 {
		t.Errorf("%d requests of the ended part reached the server", n)
	}
}

// A connection that the server took before a cut ends with it: a request
// on it that the server had not read is never forwarded, nor charged to
// the next part.
func TestCutClosesClientConnections(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c := f.dial(t)
	br := bufio.NewReader(c)
	// A first request, answered: the server has taken the connection.
	fmt.Fprintf(c, "GET http://allowed.test:%d/first HTTP/1.1\r\nHost: allowed.test\r\n\r\n", f.hport)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("first request: %s", resp.Status)
	}
	// The next one, all but its end: the server waits for the rest.
	_, _ = io.WriteString(c, f.lateRequest())
	if rep := f.session.Cut(); len(rep.Reached) != 1 {
		t.Fatalf("the part = %+v, want allowed.test reached", rep)
	}
	_, _ = io.WriteString(c, "\r\n") // may fail: the connection is closed
	f.checkNothingAfterCut(t, c, br)
}

// A request that the server read before a cut, whose handler still runs
// (here it waits for the name's resolution), connects nowhere after the
// cut: the dial that the transport finishes for it is refused, and the
// next part is charged nothing.
func TestCutEndsRequestsInFlight(t *testing.T) {
	t.Parallel()
	resolving, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := newFixture(t, func(p *egress.Policy, f *fixture) {
		pins := p.Resolver
		p.Resolver = resolverFunc(func(ctx context.Context, network, host string) ([]netip.Addr, error) {
			once.Do(func() { close(resolving) })
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return pins.LookupNetIP(ctx, network, host)
		})
	})
	c := f.dial(t)
	_, _ = io.WriteString(c, f.lateRequest()+"Connection: close\r\n\r\n")
	<-resolving
	f.session.Cut()
	close(release)
	f.checkNothingAfterCut(t, c, bufio.NewReader(c))
}

// A connection still queued on the listener at a cut (the program that
// made it wrote its request, then ended, before the server took it) is
// never given to the next part: its request is not forwarded, nor charged.
func TestCutDropsQueuedConnections(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(_ *egress.Policy, f *fixture) { f.hold = true })
	// On loopback the kernel has queued the connection once Dial returns.
	c := f.dial(t)
	_, _ = io.WriteString(c, f.lateRequest()+"Connection: close\r\n\r\n")
	f.session.Cut()
	f.release()
	f.checkNothingAfterCut(t, c, bufio.NewReader(c))
}
