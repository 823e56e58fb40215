package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Resolver turns a host name into addresses. *net.Resolver satisfies it.
// The proxy calls it once per connection and dials only the addresses it
// returned, so a name cannot resolve to one address when checked and
// another when dialled.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Pins maps lower-case host names to fixed addresses. It is a Resolver that
// answers only for the names it holds and returns an error that wraps
// ErrNotPinned for every other name, without asking DNS.
type Pins map[string][]netip.Addr

// ErrNotPinned: Pins has no address for the name.
var ErrNotPinned = errors.New("name not pinned")

// ParsePins parses "name=address,name=address,...": the value of
// CODE_EXEC_NETWORK_RESOLVE. A name given twice gets both addresses.
// Blank entries are skipped. The error names the first bad entry and wraps
// ErrBadEntry.
func ParsePins(s string) (Pins, error) {
	p := Pins{}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name, addr, ok := strings.Cut(e, "=")
		name = NormalizeHost(strings.TrimSpace(name))
		if !ok || name == "" {
			return nil, fmt.Errorf("resolve entry %q: %w: want name=address", e, ErrBadEntry)
		}
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("resolve entry %q: %w: %v", e, ErrBadEntry, err)
		}
		a, err := netip.ParseAddr(strings.Trim(strings.TrimSpace(addr), "[]"))
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("resolve entry %q: %w: %q is not an IP address", e, ErrBadEntry, addr)
		}
		p[name] = append(p[name], a.Unmap())
	}
	return p, nil
}

// LookupNetIP implements Resolver. network is "ip", "ip4" or "ip6".
func (p Pins) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range p[NormalizeHost(host)] {
		if network == "ip" || (network == "ip4") == a.Is4() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotPinned, host)
	}
	return out, nil
}

// Strings returns the pins as name=address entries.
func (p Pins) Strings() []string {
	var out []string
	for n, as := range p {
		for _, a := range as {
			out = append(out, n+"="+a.String())
		}
	}
	return out
}

// PinnedResolver answers from Pins first and asks Next for every other
// name. With a nil Next it is Pins alone: no name reaches DNS.
type PinnedResolver struct {
	Pins Pins
	Next Resolver
}

// LookupNetIP implements Resolver.
func (r PinnedResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if as, err := r.Pins.LookupNetIP(ctx, network, host); err == nil || r.Next == nil {
		return as, err
	}
	return r.Next.LookupNetIP(ctx, network, host)
}

// SystemResolver returns the resolver of the standard library (DNS and
// /etc/hosts), used for names that are not pinned.
func SystemResolver() Resolver { return net.DefaultResolver }
