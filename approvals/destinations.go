package approvals

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/codeexec/codeexec/sandbox/egress"
)

// Destination is a host and port that code names literally: a URL, a
// (host, port) pair passed to a socket call, or a /dev/tcp path.
type Destination struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	// Line is the 1-based line of the first mention.
	Line int `json:"line"`
}

// String writes host:port.
func (d Destination) String() string { return net.JoinHostPort(d.Host, strconv.Itoa(d.Port)) }

var (
	// urlRE matches URLs: scheme, host (a name, an IPv4 address or an
	// IPv6 address in brackets) and an optional port.
	urlRE = newPattern(`(?i)\b(https?|wss?|ftp)://(?:[^\s/@'"]+@)?(\[[0-9a-f:.]+\]|[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*)(?::(\d{1,5}))?`)
	// pairRE matches ("host", port), as socket calls take it.
	pairRE = newPattern(`\(\s*['"]([a-zA-Z0-9_.:-]+)['"]\s*,\s*(\d{1,5})\s*\)`)
	// devTCPRE matches bash's /dev/tcp/host/port.
	devTCPRE = newPattern(`/dev/(?:tcp|udp)/([a-zA-Z0-9_.:-]+)/(\d{1,5})`)
)

var schemePorts = map[string]int{"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}

// Destinations returns the destinations code names literally, each once,
// in the order of their first mention. Like Assess it is a triage aid:
// code can build a destination no pattern sees.
func Destinations(code string) []Destination {
	return destinations(splitText(code), &budget{left: inputBudget})
}

// destinations is Destinations of t, within b.
func destinations(t *text, b *budget) []Destination {
	var out []Destination
	seen := map[string]bool{}
	add := func(host string, port, line int) {
		host = strings.ToLower(strings.Trim(host, "[]"))
		if host == "" || port < 1 || port > 65535 {
			return
		}
		d := Destination{Host: host, Port: port, Line: line}
		if !seen[d.String()] {
			seen[d.String()] = true
			out = append(out, d)
		}
	}
	for i := range t.candidates(urlRE, pairRE, devTCPRE) {
		line := t.lines[i]
		if !b.spend(line) {
			break
		}
		for _, m := range urlRE.re().FindAllStringSubmatch(line, -1) {
			port := schemePorts[strings.ToLower(m[1])]
			if m[3] != "" {
				port, _ = strconv.Atoi(m[3])
			}
			add(m[2], port, i+1)
		}
		for _, p := range []pattern{pairRE, devTCPRE} {
			for _, m := range p.re().FindAllStringSubmatch(line, -1) {
				port, _ := strconv.Atoi(m[2])
				add(m[1], port, i+1)
			}
		}
	}
	return out
}

// destinationFindings describes the destinations t names for the
// approver: one finding that lists them and, when runs reach the network
// through the egress proxy, one per destination that the allowlist would
// refuse. policy is nil when runs have no allowlist.
func destinationFindings(t *text, b *budget, policy *egress.PolicyInfo) []Finding {
	dests := destinations(t, b)
	if len(dests) == 0 {
		return nil
	}
	names := make([]string, len(dests))
	for i, d := range dests {
		names[i] = fmt.Sprintf("%q", d.String())
	}
	list := strings.Join(names, ", ")
	if len(list) > 200 {
		list = list[:200] + "…"
	}
	out := []Finding{{
		Category: CategoryNetwork,
		Reason:   fmt.Sprintf("%s: names the destinations %s (line %d)", categoryLabel[CategoryNetwork], list, dests[0].Line),
		Line:     dests[0].Line,
	}}
	if policy == nil {
		return out
	}
	allow, err := egress.ParseAllowlist(policy.Allow)
	if err != nil {
		return out
	}
	for _, d := range dests {
		if err := allow.Check(d.Host, d.Port); err != nil {
			out = append(out, Finding{
				Category: CategoryNetwork,
				Reason:   fmt.Sprintf("%s: %q is not allowed by the network allowlist and will be refused (line %d)", categoryLabel[CategoryNetwork], d.String(), d.Line),
				Line:     d.Line,
			})
		}
	}
	return out
}
