package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPorts are the ports an allowlist entry without a port allows.
var DefaultPorts = []int{80, 443}

// ErrBadEntry is wrapped by the errors of ParseAllowlist and ParsePins.
var ErrBadEntry = errors.New("bad entry")

// Rule is one allowlist entry: a host, or every subdomain of a suffix, and
// the ports allowed there.
type Rule struct {
	// Host is a lower-case host name or IP address without a trailing dot.
	// When Suffix is set it is the suffix: the rule matches every name that
	// ends in "."+Host, and not Host itself.
	Host   string
	Suffix bool
	// Ports are the allowed ports (DefaultPorts when the entry named none).
	Ports []int
}

// String returns the rule in the form ParseAllowlist accepts.
func (r Rule) String() string {
	h := r.Host
	if a, err := netip.ParseAddr(h); err == nil && a.Is6() {
		h = "[" + h + "]"
	}
	if r.Suffix {
		h = "*." + h
	}
	if len(r.Ports) == 1 {
		return h + ":" + strconv.Itoa(r.Ports[0])
	}
	return h
}

func (r Rule) matchesHost(host string) bool {
	if r.Suffix {
		return strings.HasSuffix(host, "."+r.Host)
	}
	return host == r.Host
}

func (r Rule) allowsPort(port int) bool {
	for _, p := range r.Ports {
		if p == port {
			return true
		}
	}
	return false
}

// Allowlist is the set of destinations a run may reach. The zero value
// allows nothing. It is immutable and safe for concurrent use.
type Allowlist struct {
	rules []Rule
}

// ParseAllowlist parses entries of the forms host, host:port, *.suffix and
// *.suffix:port (an IPv6 address in brackets: [2001:db8::1]:443). Entries are
// trimmed; empty ones are skipped. An entry without a port allows
// DefaultPorts. "*.example.com" matches every subdomain of example.com at any
// depth, not example.com itself. The error names the first bad entry and
// wraps ErrBadEntry.
func ParseAllowlist(entries []string) (*Allowlist, error) {
	a := &Allowlist{}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		r, err := parseRule(e)
		if err != nil {
			return nil, fmt.Errorf("allowlist entry %q: %w: %v", e, ErrBadEntry, err)
		}
		a.rules = append(a.rules, r)
	}
	return a, nil
}

func parseRule(e string) (Rule, error) {
	var r Rule
	host, port := e, ""
	switch {
	case strings.HasPrefix(e, "["):
		end := strings.Index(e, "]")
		if end < 0 {
			return r, errors.New("missing ]")
		}
		host, port = e[1:end], e[end+1:]
		if port != "" {
			if !strings.HasPrefix(port, ":") {
				return r, errors.New("unexpected text after ]")
			}
			port = port[1:]
			if port == "" {
				return r, errors.New("empty port")
			}
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return r, errors.New("not an IPv6 address in brackets")
		}
	case strings.Count(e, ":") > 1:
		a, err := netip.ParseAddr(e)
		if err != nil {
			return r, errors.New("an IPv6 address with a port goes in brackets: [2001:db8::1]:443")
		}
		host = a.String()
	case strings.Contains(e, ":"):
		i := strings.LastIndex(e, ":")
		host, port = e[:i], e[i+1:]
		if port == "" {
			return r, errors.New("empty port")
		}
	}
	if strings.HasPrefix(host, "*.") {
		r.Suffix = true
		host = host[2:]
	}
	host = NormalizeHost(host)
	if host == "" {
		return r, errors.New("empty host")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if r.Suffix {
			return r, errors.New("a wildcard needs a domain, not an address")
		}
		host = a.Unmap().String()
	} else if err := checkName(host); err != nil {
		return r, err
	}
	r.Host = host
	if port == "" {
		r.Ports = DefaultPorts
		return r, nil
	}
	p, err := ParsePort(port)
	if err != nil {
		return r, err
	}
	r.Ports = []int{p}
	return r, nil
}

// ParsePort reads a port number from 1 to 65535.
func ParsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || s[0] == '+' {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return p, nil
}

// checkName accepts DNS names made of letters, digits, '-' and '_'.
func checkName(h string) error {
	if len(h) > 253 {
		return errors.New("name longer than 253 characters")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return errors.New("empty label in name")
		}
		if len(label) > 63 {
			return errors.New("label longer than 63 characters")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q not allowed in a name", c)
			}
		}
	}
	return nil
}

// NormalizeHost lower-cases h and drops one trailing dot.
func NormalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// Rules returns a copy of the rules in the order they were given.
func (a *Allowlist) Rules() []Rule {
	if a == nil {
		return nil
	}
	return append([]Rule(nil), a.rules...)
}

// Strings returns the rules in the form ParseAllowlist accepts; entries
// that allow the default ports are given without a port.
func (a *Allowlist) Strings() []string {
	var out []string
	for _, r := range a.Rules() {
		out = append(out, r.String())
	}
	return out
}

// Covers reports whether a allows every destination that r allows: each
// port of r, on r's host or, for a wildcard, on every name below its
// suffix. A wildcard is covered only by a wildcard whose suffix it ends in
// (*.example.com covers *.api.example.com), never by entries that name
// hosts one by one.
func (a *Allowlist) Covers(r Rule) bool {
	for _, p := range r.Ports {
		if !r.Suffix {
			if a.Check(r.Host, p) != nil {
				return false
			}
			continue
		}
		covered := false
		for _, o := range a.Rules() {
			if o.Suffix && (r.Host == o.Host || strings.HasSuffix(r.Host, "."+o.Host)) && o.allowsPort(p) {
				covered = true
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}

// Check tells whether host:port may be reached: nil, or an error that wraps
// ErrNotAllowed (no rule names the host) or ErrPort (a rule names the host,
// none the port). host may be a name or an IP address, in any case and with
// a trailing dot.
func (a *Allowlist) Check(host string, port int) error {
	h := NormalizeHost(host)
	if ad, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		h = ad.Unmap().WithZone("").String()
	}
	named := false
	for _, r := range a.Rules() {
		if !r.matchesHost(h) {
			continue
		}
		if r.allowsPort(port) {
			return nil
		}
		named = true
	}
	if named {
		return fmt.Errorf("%w: %s", ErrPort, net.JoinHostPort(h, strconv.Itoa(port)))
	}
	return fmt.Errorf("%w: %s", ErrNotAllowed, h)
}
