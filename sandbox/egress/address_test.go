package egress_test

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestSpecialPurposeRegistries takes one address from each row of IANA's
// IPv4 and IPv6 Special-Purpose Address Registries (and the multicast and
// reserved blocks): every row that is not globally reachable is refused,
// the private classes unless private addresses are allowed, the others
// always; addresses that embed an IPv4 address (mapped, compatible, NAT64,
// 6to4, Teredo) are judged by it.
func TestSpecialPurposeRegistries(t *testing.T) {
	t.Parallel()
	const (
		reachable = iota // globally reachable
		private          // refused unless CODE_EXEC_NETWORK_ALLOW_PRIVATE=true
		always           // refused always
	)
	tests := []struct {
		row  string
		addr string
		want int
	}{
		// IPv4 Special-Purpose Address Registry.
		{"0.0.0.0/8 this network", "0.1.2.3", always},
		{"0.0.0.0/32 this host on this network", "0.0.0.0", always},
		{"10.0.0.0/8 private-use", "10.9.8.7", private},
		{"100.64.0.0/10 shared address space", "100.100.1.1", private},
		{"127.0.0.0/8 loopback", "127.0.0.2", private},
		{"169.254.0.0/16 link local", "169.254.7.7", private},
		{"172.16.0.0/12 private-use", "172.20.0.1", private},
		{"192.0.0.0/24 IETF protocol assignments", "192.0.0.100", always},
		{"192.0.0.0/29 IPv4 service continuity prefix", "192.0.0.2", always},
		{"192.0.0.8/32 IPv4 dummy address", "192.0.0.8", always},
		{"192.0.0.9/32 port control protocol anycast", "192.0.0.9", reachable},
		{"192.0.0.10/32 TURN anycast", "192.0.0.10", reachable},
		{"192.0.0.170/32 NAT64/DNS64 discovery", "192.0.0.170", always},
		{"192.0.0.171/32 NAT64/DNS64 discovery", "192.0.0.171", always},
		{"192.0.2.0/24 documentation (TEST-NET-1)", "192.0.2.1", always},
		{"192.31.196.0/24 AS112-v4", "192.31.196.1", reachable},
		{"192.52.193.0/24 AMT", "192.52.193.1", reachable},
		{"192.88.99.0/24 deprecated (6to4 relay anycast)", "192.88.99.1", always},
		{"192.168.0.0/16 private-use", "192.168.9.9", private},
		{"192.175.48.0/24 direct delegation AS112 service", "192.175.48.1", reachable},
		{"198.18.0.0/15 benchmarking", "198.19.255.1", private},
		{"198.51.100.0/24 documentation (TEST-NET-2)", "198.51.100.7", always},
		{"203.0.113.0/24 documentation (TEST-NET-3)", "203.0.113.7", always},
		{"240.0.0.0/4 reserved", "250.1.2.3", always},
		{"255.255.255.255/32 limited broadcast", "255.255.255.255", always},
		{"224.0.0.0/4 multicast", "239.1.2.3", always},
		{"169.254.169.254 cloud metadata", "169.254.169.254", private},
		{"a global IPv4 address", "93.184.216.34", reachable},

		// IPv6 Special-Purpose Address Registry.
		{"::1/128 loopback", "::1", private},
		{"::/128 unspecified", "::", always},
		{"::ffff:0:0/96 IPv4-mapped, of a global address", "::ffff:93.184.216.34", reachable},
		{"::ffff:0:0/96 IPv4-mapped, of a private address", "::ffff:10.0.0.1", private},
		{"::/96 IPv4-compatible (deprecated), of a private address", "::10.0.0.1", private},
		{"::/96 IPv4-compatible (deprecated), of a global address", "::93.184.216.34", always},
		{"64:ff9b::/96 IPv4-IPv6 translation, of a global address", "64:ff9b::93.184.216.34", reachable},
		{"64:ff9b::/96 IPv4-IPv6 translation, of a documentation address", "64:ff9b::192.0.2.1", always},
		{"64:ff9b::/96 IPv4-IPv6 translation, of the metadata address", "64:ff9b::a9fe:a9fe", private},
		{"64:ff9b:1::/48 IPv4-IPv6 translation (local use)", "64:ff9b:1::1", private},
		{"100::/64 discard-only", "100::1", always},
		{"100:0:0:1::/64 dummy IPv6 prefix", "100:0:0:1::1", always},
		{"2001::/23 IETF protocol assignments", "2001:1ff::1", always},
		{"2001::/32 Teredo, of global addresses", "2001:0:5db8:d822:0:f227:a2b1:7d8c", reachable},
		{"2001::/32 Teredo, of a private client", "2001:0:5db8:d822:0:f227:f5ff:fffe", private},
		{"2001::/32 Teredo, of a private server", "2001:0:a00:1:0:f227:a2b1:7d8c", private},
		{"2001:1::1/128 port control protocol anycast", "2001:1::1", reachable},
		{"2001:1::2/128 TURN anycast", "2001:1::2", reachable},
		{"2001:1::3/128 DNS-SD service registration protocol anycast", "2001:1::3", reachable},
		{"2001:2::/48 benchmarking", "2001:2::1", private},
		{"2001:3::/32 AMT", "2001:3::1", reachable},
		{"2001:4:112::/48 AS112-v6", "2001:4:112::1", reachable},
		{"2001:10::/28 deprecated (ORCHID)", "2001:10::1", always},
		{"2001:20::/28 ORCHIDv2", "2001:20::1", reachable},
		{"2001:30::/28 drone remote ID DETs", "2001:30::1", reachable},
		{"2001:db8::/32 documentation", "2001:db8::1", always},
		{"2002::/16 6to4, of a global address", "2002:5db8:d822::1", reachable},
		{"2002::/16 6to4, of a private address", "2002:c0a8:101::1", private},
		{"2002::/16 6to4, of a reserved address", "2002:fa01:203::1", always},
		{"2620:4f:8000::/48 direct delegation AS112 service", "2620:4f:8000::1", reachable},
		{"3fff::/20 documentation", "3fff:fff::1", always},
		{"5f00::/16 segment routing SIDs", "5f00::1", always},
		{"fc00::/7 unique-local", "fd12:3456::1", private},
		{"fe80::/10 link-local unicast", "fe80::1", private},
		{"fd00:ec2::254 cloud metadata", "fd00:ec2::254", private},
		{"ff00::/8 multicast", "ff02::1", always},
		{"fec0::/10 site-local (deprecated), reserved by the IETF", "fec0::1", always},
		{"outside 2000::/3, reserved by the IETF", "4000::1", always},
		{"a global IPv6 address", "2606:4700::1", reachable},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		class, isAlways := egress.Classify(a)
		okStrict, _ := egress.Permitted(a, false)
		okPrivate, _ := egress.Permitted(a, true)
		got := reachable
		switch {
		case class != "" && isAlways:
			got = always
		case class != "":
			got = private
		}
		if got != tt.want || okStrict != (tt.want == reachable) || okPrivate != (tt.want != always) {
			t.Errorf("%s: Classify(%s) = %q, always %v (Permitted: %v, with private allowed %v); want %s",
				tt.row, tt.addr, class, isAlways, okStrict, okPrivate, []string{"reachable", "refused unless private addresses are allowed", "always refused"}[tt.want])
		}
	}
}

var update = flag.Bool("update", false, "rewrite the table of ranges in docs/network.md")

const (
	rangesBegin = "<!-- ranges: generated by go test ./sandbox/egress -run TestDocsListTheRanges -update -->\n"
	rangesEnd   = "<!-- end of ranges -->"
)

// rangesTable renders egress.Ranges as docs/network.md shows them.
func rangesTable() string {
	var b strings.Builder
	b.WriteString("| range | what | refused | defined in |\n| --- | --- | --- | --- |\n")
	for _, r := range egress.Ranges {
		class := r.Class
		if class == "" {
			class = "global unicast"
		}
		refused := map[egress.Refusal]string{
			egress.Reachable:     "no: globally reachable",
			egress.UnlessPrivate: "unless `CODE_EXEC_NETWORK_ALLOW_PRIVATE=true`",
			egress.Always:        "always",
		}[r.Refusal]
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Prefix, class, refused, r.Source)
	}
	return b.String()
}

// TestDocsListTheRanges keeps docs/network.md's table of ranges in step
// with egress.Ranges.
func TestDocsListTheRanges(t *testing.T) {
	sandboxtest.CheckDocBlock(t, "../../docs/network.md", rangesBegin, rangesEnd, rangesTable(), *update,
		"go test ./sandbox/egress -run TestDocsListTheRanges -update")
}
