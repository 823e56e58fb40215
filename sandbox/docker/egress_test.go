package docker

import (
	"net"
	"os"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress"
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
			r, _ := newRunner(t, Config{Languages: []string{"python"}, PoolSize: tc.pool, Egress: egress.New(e.Policy(t, tc.allowPrivate), nil)})
			if !r.Capabilities().Active("network") {
				t.Fatal("the network protection is not active")
			}
			raws := []string{"127.0.0.1"}
			if ip != "127.0.0.1" {
				raws = append(raws, ip)
			}
			for range max(1, tc.pool*2) {
				e.CheckEgress(t, r, tc.allowPrivate, raws...)
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
