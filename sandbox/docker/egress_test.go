package docker

import (
	"context"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// bridgeIP is the IPv4 address of the default Docker bridge on this host,
// or "" when there is none.
func bridgeIP() string {
	ifi, err := net.InterfaceByName("docker0")
	if err != nil {
		return ""
	}
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// TestEgressAllowlist runs the shared egress check in docker mode. The
// listeners are on the Docker bridge's own address when there is one (a
// container on a bridge network could reach it directly; a run container
// must not), else on loopback. Raw sockets try both.
func TestEgressAllowlist(t *testing.T) {
	engine(t)
	ip := bridgeIP()
	if ip == "" {
		ip = "127.0.0.1"
	}
	e := sandboxtest.StartEgress(t, ip)
	for _, tc := range []struct {
		name         string
		allowPrivate bool
		pool         int
	}{
		{"private allowed, warm pool", true, 1},
		{"private refused", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newRunner(t, Config{Languages: []string{"python", "bash"}, PoolSize: tc.pool, Egress: proxy.New(e.Policy(t, tc.allowPrivate), nil)})
			if !r.Capabilities().Active("network") {
				t.Fatal("the network protection is not active")
			}
			raws := []string{"127.0.0.1"}
			if ip != "127.0.0.1" {
				raws = append(raws, ip)
			}
			e.CheckEgress(t, r, tc.allowPrivate, raws...)
			if tc.pool > 0 {
				// The pool fills after the first request. A warm
				// container's session is open before its run; the
				// report must still be the run's alone.
				waitWarm(t, r, "python", 1)
				e.CheckEgress(t, r, tc.allowPrivate, raws...)
			}
			if _, warm := servedOf(r).List(); tc.pool > 0 && !slices.Contains(warm, true) {
				t.Fatalf("no run took a warm container: %v", warm)
			}
			// A session's container reaches what a run's does, call
			// after call, each call with a report of its own.
			e.CheckSessionEgress(t, r.Sessions(), tc.allowPrivate, raws...)
			if tc.allowPrivate {
				// The session's relay and what is queued on it end with
				// each call.
				e.CheckStoppedRelay(t, r.Sessions())
			}
			if tc.allowPrivate {
				// A run's own allowlist (a principal's network) narrows
				// the proxy's, in a warm container, a cold one and a
				// session's.
				e.CheckNarrowedEgress(t, r, r.Sessions())
			}
			if tc.allowPrivate {
				// A timeout kills the relay with the rest; the next
				// call has it again.
				sockets := func() int {
					entries, err := os.ReadDir(r.egressDir)
					if err != nil {
						t.Fatal(err)
					}
					return len(entries)
				}
				before := sockets()
				s := sandboxtest.StartSession(t, r.Sessions(), "python")
				if sockets() != before+1 {
					t.Fatalf("the session has no socket directory of its own")
				}
				req := sandboxtest.Req("python", "while True: pass")
				req.Limits.Timeout = 500 * time.Millisecond
				if res, err := s.Exec(context.Background(), req); err != nil || !res.TimedOut {
					t.Fatalf("a timeout: %+v %v", res, err)
				}
				res := sandboxtest.SessionCall(t, s, "python", e.Program())
				if got := sandboxtest.Line(res.Stdout, "http"); got != "200 plain-ok" {
					t.Fatalf("after a timeout: http: %q\n%s%s", got, res.Stdout, res.Stderr)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if n := sockets(); n != before {
					t.Fatalf("%d socket directories after the session closed, want %d", n, before)
				}
			}
			dir := r.egressDir
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("the egress socket directory %s is still there after Close (%v)", dir, err)
			}
		})
	}
}
