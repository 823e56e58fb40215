package egress

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// NeverReached names the allowlist entries that the proxy can never let a
// run reach, one sentence each that says why and what to do, in the order
// of the entries: an entry that is an address the proxy refuses (loopback,
// private, link-local, cloud metadata ... unless allowPrivate; unspecified,
// documentation, multicast ... always), the name localhost or a name below
// .localhost (loopback, RFC 6761), and a name that pins gives only refused
// addresses (for a wildcard entry, each pinned name below it). A pinned
// name is judged by its pins alone, as the proxy does. The server logs
// them at start, so that an operator learns at once what no run could show.
func NeverReached(allow *Allowlist, allowPrivate bool, pins Pins) []string {
	var out []string
	say := func(r Rule, format string, args ...any) {
		out = append(out, fmt.Sprintf("CODE_EXEC_NETWORK_ALLOW entry %s can never be reached: ", r)+fmt.Sprintf(format, args...))
	}
	for _, r := range allow.Rules() {
		if a, err := netip.ParseAddr(r.Host); err == nil {
			if which, always, refused := refusedAll([]netip.Addr{a}, allowPrivate); refused {
				say(r, "the egress proxy %s", refusal(which, always))
			}
			continue
		}
		if as, ok := pins[r.Host]; ok && !r.Suffix {
			if which, always, refused := refusedAll(as, allowPrivate); refused {
				say(r, "CODE_EXEC_NETWORK_RESOLVE pins %s to %s, and the egress proxy %s", r.Host, which, refusal(pronoun(as), always))
			}
			continue
		}
		if isLocalhost(r.Host) && !allowPrivate {
			name := r.Host
			if r.Suffix {
				name = "every name below " + r.Host
			}
			say(r, "%s means this host's loopback addresses, and the egress proxy %s", name, refusal("them", false))
			continue
		}
		if r.Suffix {
			for _, name := range slices.Sorted(maps.Keys(pins)) {
				if !r.matchesHost(name) {
					continue
				}
				if which, always, refused := refusedAll(pins[name], allowPrivate); refused {
					say(r, "CODE_EXEC_NETWORK_RESOLVE pins %s, a name it allows, to %s, and the egress proxy %s", name, which, refusal(pronoun(pins[name]), always))
				}
			}
		}
	}
	return out
}

// refusal says that the proxy refuses what, always or unless private
// addresses are allowed, and what to do.
func refusal(what string, always bool) string {
	if always {
		return "always refuses " + what + "; remove the entry"
	}
	return "refuses " + what + " unless CODE_EXEC_NETWORK_ALLOW_PRIVATE=true; set it to let runs reach loopback, private, link-local and cloud-metadata addresses (read its warning first), or remove the entry"
}

// refusedAll reports whether the proxy refuses every one of addrs, which
// they are ("127.0.0.1 (loopback)") and whether it refuses them all even
// with private addresses allowed.
func refusedAll(addrs []netip.Addr, allowPrivate bool) (which string, always, refused bool) {
	var named []string
	always = true
	for _, a := range addrs {
		if ok, _ := Permitted(a, allowPrivate); ok {
			return "", false, false
		}
		class, alw := Classify(a)
		named = append(named, a.String()+" ("+class+")")
		always = always && alw
	}
	return strings.Join(named, ", "), always, len(named) > 0
}

// pronoun is "it" for one address, "them" for more.
func pronoun(addrs []netip.Addr) string {
	if len(addrs) == 1 {
		return "it"
	}
	return "them"
}

// isLocalhost reports whether name is localhost or a name below it.
func isLocalhost(name string) bool {
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}
