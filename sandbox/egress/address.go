package egress

import (
	"net/netip"
)

// Refusal says when the egress proxy refuses an address range.
type Refusal int

// The refusals of a Range.
const (
	// Reachable: the range is globally reachable; the proxy lets runs
	// connect to it (the allowlist still decides which names).
	Reachable Refusal = iota
	// UnlessPrivate: the host's own or a nearby network (loopback,
	// private-use, shared, link-local, cloud metadata, benchmarking,
	// local-use NAT64), refused unless CODE_EXEC_NETWORK_ALLOW_PRIVATE=true.
	UnlessPrivate
	// Always: no destination a run needs has such an address
	// (unspecified, documentation, reserved, multicast, deprecated ...).
	Always
)

// Range is one row of the table the proxy judges resolved addresses by.
type Range struct {
	Prefix netip.Prefix
	// Class names the range in reports ("private", "documentation", ...).
	Class   string
	Refusal Refusal
	// Source is where the range is defined (an RFC).
	Source string
}

// Ranges is the table of special-purpose ranges, from IANA's IPv4 and IPv6
// Special-Purpose Address Registries (every row, the globally reachable
// ones too, so that a more specific reachable row wins over the block it
// sits in), the multicast blocks, cloud metadata addresses, and the IPv6
// space outside 2000::/3 that the IETF reserves. The most specific row
// that contains an address decides; an address in none is reachable.
// Addresses that embed an IPv4 address are judged by it first (see
// Classify). docs/network.md lists this table (TestDocsListTheRanges).
var Ranges = []Range{
	// IPv4 Special-Purpose Address Registry.
	{netip.MustParsePrefix("0.0.0.0/8"), "this network", Always, "RFC 791"},
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified", Always, "RFC 1122"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private", UnlessPrivate, "RFC 1918"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)", UnlessPrivate, "RFC 6598"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback", UnlessPrivate, "RFC 1122"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local", UnlessPrivate, "RFC 3927"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private", UnlessPrivate, "RFC 1918"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments", Always, "RFC 6890"},
	{netip.MustParsePrefix("192.0.0.0/29"), "IPv4 service continuity", Always, "RFC 7335"},
	{netip.MustParsePrefix("192.0.0.8/32"), "IPv4 dummy address", Always, "RFC 7600"},
	{netip.MustParsePrefix("192.0.0.9/32"), "port control protocol anycast", Reachable, "RFC 7723"},
	{netip.MustParsePrefix("192.0.0.10/32"), "TURN anycast", Reachable, "RFC 8155"},
	{netip.MustParsePrefix("192.0.0.170/32"), "NAT64/DNS64 discovery", Always, "RFC 8880"},
	{netip.MustParsePrefix("192.0.0.171/32"), "NAT64/DNS64 discovery", Always, "RFC 8880"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation", Always, "RFC 5737"},
	{netip.MustParsePrefix("192.31.196.0/24"), "AS112-v4", Reachable, "RFC 7535"},
	{netip.MustParsePrefix("192.52.193.0/24"), "AMT", Reachable, "RFC 7450"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast (deprecated)", Always, "RFC 7526"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private", UnlessPrivate, "RFC 1918"},
	{netip.MustParsePrefix("192.175.48.0/24"), "AS112 direct delegation", Reachable, "RFC 7534"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking", UnlessPrivate, "RFC 2544"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation", Always, "RFC 5737"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation", Always, "RFC 5737"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved", Always, "RFC 1112"},
	{netip.MustParsePrefix("255.255.255.255/32"), "limited broadcast", Always, "RFC 919"},
	// IPv4 multicast, and cloud metadata.
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast", Always, "RFC 5771"},
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata", UnlessPrivate, "cloud providers"},

	// IPv6 Special-Purpose Address Registry. IPv4-mapped (::ffff:0:0/96),
	// IPv4-compatible (::/96), NAT64 (64:ff9b::/96), 6to4 (2002::/16) and
	// Teredo (2001::/32) addresses are judged by their IPv4 address first.
	{netip.MustParsePrefix("::/128"), "unspecified", Always, "RFC 4291"},
	{netip.MustParsePrefix("::1/128"), "loopback", UnlessPrivate, "RFC 4291"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible (deprecated)", Always, "RFC 4291"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64", Reachable, "RFC 6052"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64 local use", UnlessPrivate, "RFC 8215"},
	{netip.MustParsePrefix("100::/64"), "discard-only", Always, "RFC 6666"},
	{netip.MustParsePrefix("100:0:0:1::/64"), "dummy IPv6 prefix", Always, "RFC 9780"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments", Always, "RFC 2928"},
	{netip.MustParsePrefix("2001::/32"), "Teredo", Reachable, "RFC 4380"},
	{netip.MustParsePrefix("2001:1::1/128"), "port control protocol anycast", Reachable, "RFC 7723"},
	{netip.MustParsePrefix("2001:1::2/128"), "TURN anycast", Reachable, "RFC 8155"},
	{netip.MustParsePrefix("2001:1::3/128"), "DNS-SD service registration anycast", Reachable, "RFC 9665"},
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking", UnlessPrivate, "RFC 5180"},
	{netip.MustParsePrefix("2001:3::/32"), "AMT", Reachable, "RFC 7450"},
	{netip.MustParsePrefix("2001:4:112::/48"), "AS112-v6", Reachable, "RFC 7535"},
	{netip.MustParsePrefix("2001:10::/28"), "ORCHID (deprecated)", Always, "RFC 4843"},
	{netip.MustParsePrefix("2001:20::/28"), "ORCHIDv2", Reachable, "RFC 7343"},
	{netip.MustParsePrefix("2001:30::/28"), "drone remote ID DETs", Reachable, "RFC 9374"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation", Always, "RFC 3849"},
	{netip.MustParsePrefix("2002::/16"), "6to4", Reachable, "RFC 3056"},
	{netip.MustParsePrefix("2620:4f:8000::/48"), "AS112 direct delegation", Reachable, "RFC 7534"},
	{netip.MustParsePrefix("3fff::/20"), "documentation", Always, "RFC 9637"},
	{netip.MustParsePrefix("5f00::/16"), "segment routing SIDs", Always, "RFC 9602"},
	{netip.MustParsePrefix("fc00::/7"), "private", UnlessPrivate, "RFC 4193"},
	{netip.MustParsePrefix("fe80::/10"), "link-local", UnlessPrivate, "RFC 4291"},
	// IPv6 multicast, cloud metadata, and what lies outside 2000::/3
	// (global unicast) that no row above names: reserved by the IETF.
	{netip.MustParsePrefix("ff00::/8"), "multicast", Always, "RFC 4291"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata", UnlessPrivate, "cloud providers"},
	{netip.MustParsePrefix("::/0"), "reserved", Always, "RFC 4291 (IPv6 address space)"},
	{netip.MustParsePrefix("2000::/3"), "", Reachable, "RFC 4291 (global unicast)"},
}

// rangeOf returns the most specific row of Ranges that contains a.
func rangeOf(a netip.Addr) (Range, bool) {
	var best Range
	found := false
	for _, r := range Ranges {
		if r.Prefix.Contains(a) && (!found || r.Prefix.Bits() > best.Prefix.Bits()) {
			best, found = r, true
		}
	}
	return best, found
}

// The IPv6 prefixes whose addresses carry an IPv4 address.
var (
	compatible = netip.MustParsePrefix("::/96")
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
)

// embeddedIPv4 returns the IPv4 addresses that an IPv6 address of a
// transition mechanism carries, by which it is judged: the last 32 bits of
// an IPv4-compatible (::/96, not :: or ::1) or NAT64 (64:ff9b::/96)
// address, bits 16-47 of a 6to4 address (2002::/16), and the server (bits
// 32-63) and the client (the last 32 bits, inverted) of a Teredo address
// (2001::/32).
func embeddedIPv4(a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	v4 := func(p []byte) netip.Addr { return netip.AddrFrom4([4]byte{p[0], p[1], p[2], p[3]}) }
	switch {
	case compatible.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return []netip.Addr{v4(b[12:])}
	case nat64.Contains(a):
		return []netip.Addr{v4(b[12:])}
	case sixToFour.Contains(a):
		return []netip.Addr{v4(b[2:6])}
	case teredo.Contains(a):
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []netip.Addr{v4(b[4:8]), netip.AddrFrom4(client)}
	}
	return nil
}

// Classify returns the class of a refused address ("loopback", "private",
// "documentation", "cloud metadata", ...), whether that class is refused
// even when private addresses are allowed, and "" for an address that is
// reachable under the policy. IPv4-mapped addresses are classified as the
// IPv4 address they are; IPv4-compatible, NAT64, 6to4 and Teredo addresses
// by the IPv4 addresses they carry (the first refused one decides), and
// then by their own row of Ranges.
func Classify(a netip.Addr) (class string, always bool) {
	a = a.Unmap().WithZone("")
	for _, v4 := range embeddedIPv4(a) {
		if class, always := Classify(v4); class != "" {
			return class, always
		}
	}
	r, ok := rangeOf(a)
	if !ok || r.Refusal == Reachable {
		return "", false
	}
	return r.Class, r.Refusal == Always
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
