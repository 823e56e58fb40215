package egress

import (
	"net/netip"
)

// Address classes refused after resolution. The names appear in reports.
var (
	// privatePrefixes are refused unless private addresses are allowed.
	privatePrefixes = []struct {
		prefix netip.Prefix
		class  string
	}{
		// Cloud metadata first, so that it is named as such; like the
		// rest of this list it is reachable only when the operator allows
		// private addresses (SPEC: "Network"), and the server then warns.
		{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata"},
		{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
		{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
		{netip.MustParsePrefix("::1/128"), "loopback"},
		{netip.MustParsePrefix("10.0.0.0/8"), "private"},
		{netip.MustParsePrefix("172.16.0.0/12"), "private"},
		{netip.MustParsePrefix("192.168.0.0/16"), "private"},
		{netip.MustParsePrefix("fc00::/7"), "private"},
		{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)"},
		{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
		{netip.MustParsePrefix("fe80::/10"), "link-local"},
	}
	// alwaysRefused are refused even when private addresses are allowed:
	// no destination a run needs has such an address.
	alwaysRefused = []struct {
		prefix netip.Prefix
		class  string
	}{
		{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
		{netip.MustParsePrefix("::/128"), "unspecified"},
		{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
		{netip.MustParsePrefix("ff00::/8"), "multicast"},
		{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	}
	// nat64 embeds an IPv4 address in its last 32 bits.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
)

// Classify returns the class of a refused address ("loopback", "private",
// "link-local", "cloud metadata", ...), whether that class is refused even
// when private addresses are allowed, and "" for an address that is
// reachable under the policy. IPv4-mapped and NAT64 addresses are classified
// by the IPv4 address they carry.
func Classify(a netip.Addr) (class string, always bool) {
	a = a.Unmap().WithZone("")
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	for _, p := range alwaysRefused {
		if p.prefix.Contains(a) {
			return p.class, true
		}
	}
	for _, p := range privatePrefixes {
		if p.prefix.Contains(a) {
			return p.class, false
		}
	}
	return "", false
}

// Permitted reports whether a may be dialled and, if not, why.
func Permitted(a netip.Addr, allowPrivate bool) (ok bool, class string) {
	class, always := Classify(a)
	switch {
	case class == "":
		return true, ""
	case always:
		return false, class
	case allowPrivate:
		return true, ""
	}
	return false, class
}
