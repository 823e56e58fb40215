package seatbelt

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Decision is what a profile decides for a Query.
type Decision int

const (
	// Unknown: the rules that decide depend on what Evaluate does not
	// model (a vnode type, a sandbox extension, the target of a signal).
	Unknown Decision = iota
	// Allowed: the operation is allowed whatever those are.
	Allowed
	// Denied: the operation is refused whatever those are.
	Denied
)

func (d Decision) String() string {
	switch d {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	}
	return "unknown"
}

// Query is one operation that a sandboxed program attempts.
type Query struct {
	// Op is the Seatbelt operation: file-read-data, file-write-create,
	// file-map-executable, process-exec, network-outbound, mach-lookup,
	// sysctl-read, ...
	Op string
	// Path is the real path of a file operation, or of the Unix socket of
	// a network operation.
	Path string
	// Remote is the "address:port" a network operation reaches (an IP
	// address, not a name).
	Remote string
	// Name is the service of mach-lookup or the name of sysctl-read.
	Name string
}

// Profile is a parsed Seatbelt profile.
type Profile struct {
	rules []rule
	// deny is what (deny default) or (allow default) set: the decision
	// when no rule matches.
	deflt Decision
}

type rule struct {
	allow   bool
	ops     []string
	filters []node // any of them (none: every operation of ops)
}

// node is an S-expression: an atom (symbol, string or regex) or a list.
type node struct {
	atom  string
	kind  byte // 's' symbol, 'q' string, 'r' regex, 'l' list
	items []node
}

// Parse reads a profile in the subset of SBPL that this package writes
// and that sandbox-runtime and Codex write: (version 1), then (allow ...)
// and (deny ...) rules of operations and filters. Other forms fail.
func Parse(src string) (*Profile, error) {
	forms, err := readAll(src)
	if err != nil {
		return nil, err
	}
	p := &Profile{deflt: Allowed}
	for _, f := range forms {
		if f.kind != 'l' || len(f.items) == 0 || f.items[0].kind != 's' {
			return nil, fmt.Errorf("seatbelt: unexpected top-level form %s", f)
		}
		switch head := f.items[0].atom; head {
		case "version":
			if len(f.items) != 2 || f.items[1].atom != "1" {
				return nil, fmt.Errorf("seatbelt: unsupported %s", f)
			}
		case "allow", "deny":
			r := rule{allow: head == "allow"}
			for _, it := range f.items[1:] {
				switch {
				case it.kind == 's':
					r.ops = append(r.ops, it.atom)
				case it.kind == 'l' && len(it.items) > 0 && it.items[0].atom == "with":
					// (with message ...), (with report): no effect on the decision.
				case it.kind == 'l':
					r.filters = append(r.filters, it)
				default:
					return nil, fmt.Errorf("seatbelt: unexpected %s in %s", it, f)
				}
			}
			if len(r.ops) == 0 {
				return nil, fmt.Errorf("seatbelt: a rule without an operation: %s", f)
			}
			if len(r.ops) == 1 && r.ops[0] == "default" && len(r.filters) == 0 {
				p.deflt = ifDecision(r.allow)
				continue
			}
			p.rules = append(p.rules, r)
		default:
			return nil, fmt.Errorf("seatbelt: unsupported form %s", f)
		}
	}
	return p, nil
}

func ifDecision(allow bool) Decision {
	if allow {
		return Allowed
	}
	return Denied
}

// Evaluate decides q as Seatbelt does: the last rule whose operation and
// filters match decides, and the default when none does. A rule whose
// match depends on a filter Evaluate does not model makes the result
// Unknown, unless every way it could go ends the same.
func (p *Profile) Evaluate(q Query) Decision {
	return p.decide(q, len(p.rules))
}

// decide evaluates q with the first n rules.
func (p *Profile) decide(q Query, n int) Decision {
	for i := n - 1; i >= 0; i-- {
		r := p.rules[i]
		if !matchOp(r.ops, q.Op) {
			continue
		}
		m := tYes
		if len(r.filters) > 0 {
			m = anyOf(r.filters, q)
		}
		switch m {
		case tYes:
			return ifDecision(r.allow)
		case tMaybe:
			// Matching decides r's way; not matching lets the earlier
			// rules decide. Known only when both agree.
			if rest := p.decide(q, i); rest == ifDecision(r.allow) {
				return rest
			}
			return Unknown
		}
	}
	return p.deflt
}

// matchOp reports whether one of a rule's operations covers op: the same
// name, "default", or a name ending in * that op starts with.
func matchOp(ops []string, op string) bool {
	for _, o := range ops {
		if o == op || o == "default" {
			return true
		}
		if prefix, ok := strings.CutSuffix(o, "*"); ok && strings.HasPrefix(op, prefix) {
			return true
		}
	}
	return false
}

// tri is a match that may be unknown.
type tri int

const (
	tNo tri = iota
	tYes
	tMaybe
)

func anyOf(fs []node, q Query) tri {
	out := tNo
	for _, f := range fs {
		switch match(f, q) {
		case tYes:
			return tYes
		case tMaybe:
			out = tMaybe
		}
	}
	return out
}

func allOf(fs []node, q Query) tri {
	out := tYes
	for _, f := range fs {
		switch match(f, q) {
		case tNo:
			return tNo
		case tMaybe:
			out = tMaybe
		}
	}
	return out
}

// match evaluates one filter for q.
func match(f node, q Query) tri {
	if f.kind != 'l' || len(f.items) == 0 {
		return tMaybe
	}
	args := f.items[1:]
	arg := func() (string, bool) {
		if len(args) == 1 && (args[0].kind == 'q' || args[0].kind == 'r') {
			return args[0].atom, true
		}
		return "", false
	}
	switch f.items[0].atom {
	case "require-all":
		return allOf(args, q)
	case "require-any":
		return anyOf(args, q)
	case "require-not":
		if len(args) != 1 {
			return tMaybe
		}
		switch match(args[0], q) {
		case tYes:
			return tNo
		case tNo:
			return tYes
		}
		return tMaybe
	case "literal", "path":
		s, ok := arg()
		if !ok {
			return tMaybe
		}
		return boolTri(q.Path != "" && q.Path == s)
	case "subpath":
		s, ok := arg()
		if !ok {
			return tMaybe
		}
		return boolTri(q.Path != "" && (q.Path == s || strings.HasPrefix(q.Path, strings.TrimSuffix(s, "/")+"/")))
	case "prefix":
		s, ok := arg()
		if !ok {
			return tMaybe
		}
		return boolTri(q.Path != "" && strings.HasPrefix(q.Path, s))
	case "regex":
		s, ok := arg()
		if !ok {
			return tMaybe
		}
		re, err := regexp.Compile(s)
		if err != nil {
			return tMaybe
		}
		return boolTri(q.Path != "" && re.MatchString(q.Path))
	case "global-name":
		s, ok := arg()
		if !ok {
			return tMaybe
		}
		return boolTri(q.Op == "mach-lookup" && q.Name == s)
	case "sysctl-name":
		s, ok := arg()
		if !ok {
			return tMaybe
		}
		return boolTri(q.Op == "sysctl-read" && q.Name == s)
	case "sysctl-name-prefix":
		s, ok := arg()
		if !ok {
			return tMaybe
		}
		return boolTri(q.Op == "sysctl-read" && strings.HasPrefix(q.Name, s))
	case "remote":
		if len(args) == 2 && args[0].atom == "ip" && args[1].kind == 'q' {
			return boolTri(q.Remote != "" && matchIP(args[1].atom, q.Remote))
		}
		if len(args) == 2 && args[0].atom == "unix-socket" && args[1].kind == 'l' {
			if q.Remote != "" {
				return tNo
			}
			return match(args[1], q)
		}
		return tMaybe
	}
	// vnode-type, target, extension, local, ... are not modelled.
	return tMaybe
}

func boolTri(b bool) tri {
	if b {
		return tYes
	}
	return tNo
}

// matchIP matches "host:port" against a filter's "host:port", whose host
// is *, localhost (127.0.0.1 and ::1) or an address, and port * or a number.
func matchIP(filter, remote string) bool {
	fh, fp, ok := cutPort(filter)
	rh, rp, ok2 := cutPort(remote)
	if !ok || !ok2 {
		return false
	}
	if fp != "*" && fp != rp {
		return false
	}
	switch fh {
	case "*":
		return true
	case "localhost":
		a, err := netip.ParseAddr(rh)
		return err == nil && a.Unmap().IsLoopback() && (a.Unmap() == netip.MustParseAddr("127.0.0.1") || a == netip.IPv6Loopback())
	}
	return fh == rh
}

// cutPort splits "host:port" (the host may be an IPv6 address, in
// brackets or not).
func cutPort(s string) (host, port string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", false
	}
	host, port = strings.Trim(s[:i], "[]"), s[i+1:]
	if port != "*" {
		if _, err := strconv.Atoi(port); err != nil {
			return "", "", false
		}
	}
	return host, port, true
}

func (n node) String() string {
	switch n.kind {
	case 'q':
		return quote(n.atom)
	case 'r':
		return `#"` + n.atom + `"`
	case 'l':
		parts := make([]string, len(n.items))
		for i, it := range n.items {
			parts[i] = it.String()
		}
		return "(" + strings.Join(parts, " ") + ")"
	}
	return n.atom
}

// readAll reads the S-expressions of src; ; starts a comment to the end
// of the line.
func readAll(src string) ([]node, error) {
	r := &reader{s: src}
	var out []node
	for {
		r.space()
		if r.i >= len(r.s) {
			return out, nil
		}
		n, err := r.read()
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
}

type reader struct {
	s string
	i int
}

var errUnbalanced = errors.New("seatbelt: unbalanced parentheses")

func (r *reader) space() {
	for r.i < len(r.s) {
		switch c := r.s[r.i]; {
		case c == ';':
			for r.i < len(r.s) && r.s[r.i] != '\n' {
				r.i++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			r.i++
		default:
			return
		}
	}
}

func (r *reader) read() (node, error) {
	r.space()
	if r.i >= len(r.s) {
		return node{}, errUnbalanced
	}
	switch c := r.s[r.i]; {
	case c == '(':
		r.i++
		n := node{kind: 'l'}
		for {
			r.space()
			if r.i >= len(r.s) {
				return node{}, errUnbalanced
			}
			if r.s[r.i] == ')' {
				r.i++
				return n, nil
			}
			it, err := r.read()
			if err != nil {
				return node{}, err
			}
			n.items = append(n.items, it)
		}
	case c == ')':
		return node{}, errUnbalanced
	case c == '"':
		s, err := r.str()
		return node{kind: 'q', atom: s}, err
	case c == '#' && strings.HasPrefix(r.s[r.i:], `#"`):
		r.i++
		s, err := r.str()
		return node{kind: 'r', atom: s}, err
	}
	start := r.i
	for r.i < len(r.s) && !strings.ContainsRune(" \t\r\n()\";", rune(r.s[r.i])) {
		r.i++
	}
	return node{kind: 's', atom: r.s[start:r.i]}, nil
}

// str reads a double-quoted string at r.i, with \\ and \" escapes (and
// \n, \t).
func (r *reader) str() (string, error) {
	r.i++ // the opening quote
	var b strings.Builder
	for r.i < len(r.s) {
		c := r.s[r.i]
		r.i++
		switch c {
		case '"':
			return b.String(), nil
		case '\\':
			if r.i >= len(r.s) {
				return "", errors.New("seatbelt: unterminated string")
			}
			e := r.s[r.i]
			r.i++
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("seatbelt: unterminated string")
}
