package principals

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// MaxFileBytes bounds the principals file.
const MaxFileBytes = 1 << 20

// minMemory is the least memory a run may be given (as CODE_EXEC_MEMORY).
const minMemory = 32 << 20

// maxRunsPerMinute bounds runs_per_minute.
const maxRunsPerMinute = 1_000_000

// fields are the keys a principal may have, in the order the
// documentation gives them.
var fields = []string{"name", "org", "token_sha256", "languages", "network", "network_allow", "files", "packages",
	"max_sessions", "approval", "max_timeout", "memory", "cpus", "max_concurrent", "runs_per_minute"}

// namePattern is what a principal's name may look like: it names metrics
// series, log records and the run token's subject.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// Parse reads a principals file (YAML):
//
//	principals:
//	  - name: analytics-agent
//	    org: acme
//	    token_sha256: 9f86d08...
//	    languages: [python]
//	    ...
//
// and returns its principals, each field it does not set taken from d. It
// refuses, with one line that names the principal and the field, an unknown
// field, a bad value, a token hash that is not 64 hex digits, a name or
// token hash that two principals share, and a value above d's cap.
func Parse(data []byte, d Defaults) ([]*Principal, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("the file is %d bytes, more than the %d a principals file may have", len(data), MaxFileBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %s", oneLine(err.Error()))
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("the file is empty: it must list principals (principals: [...])")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the file must be a mapping with the key principals", root.Line)
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "principals" {
			return nil, fmt.Errorf("line %d: unknown key %q at the top: the file holds only principals", k.Line, k.Value)
		}
		if list != nil {
			return nil, fmt.Errorf("line %d: the key principals is given twice", k.Line)
		}
		list = v
	}
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil, errors.New("the file must have principals: a list of principals")
	}
	if len(list.Content) == 0 {
		return nil, errors.New("principals is empty: list at least one (a server with a principals file serves only them)")
	}
	var (
		out    []*Principal
		names  = map[string]int{}
		hashes = map[[32]byte]string{}
	)
	for i, n := range list.Content {
		p, err := parsePrincipal(n, i, d)
		if err != nil {
			return nil, err
		}
		if line, dup := names[p.Name]; dup {
			return nil, fmt.Errorf("principal %q (line %d): field name: the name is already that of the principal at line %d", p.Name, n.Line, line)
		}
		if other, dup := hashes[p.token]; dup {
			return nil, fmt.Errorf("principal %q (line %d): field token_sha256: the same token hash as principal %q: each principal needs a token of its own", p.Name, n.Line, other)
		}
		names[p.Name], hashes[p.token] = n.Line, p.Name
		out = append(out, p)
	}
	return out, nil
}

// fieldError is the error of one field of one principal.
type fieldError struct {
	who   string
	line  int
	field string
	msg   string
}

func (e *fieldError) Error() string {
	return fmt.Sprintf("%s (line %d): field %s: %s", e.who, e.line, e.field, e.msg)
}

// parsePrincipal reads the i-th principal of the list.
func parsePrincipal(n *yaml.Node, i int, d Defaults) (*Principal, error) {
	who := fmt.Sprintf("principal #%d", i+1)
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s (line %d): a principal is a mapping of fields (name, token_sha256, ...)", who, n.Line)
	}
	vals := map[string]*yaml.Node{}
	var order []string
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], n.Content[j+1]
		if k.Value == "name" && v.Kind == yaml.ScalarNode {
			who = fmt.Sprintf("principal %q", v.Value)
		}
		vals[k.Value] = v
		order = append(order, k.Value)
	}
	seen := map[string]bool{}
	for j, key := range order {
		k := n.Content[2*j]
		switch {
		case !slices.Contains(fields, key):
			return nil, &fieldError{who, k.Line, key, "unknown field: a principal takes " + strings.Join(fields, ", ")}
		case seen[key]:
			return nil, &fieldError{who, k.Line, key, "given twice"}
		}
		seen[key] = true
	}
	f := &fieldReader{who: who, vals: vals, line: n.Line}
	p := &Principal{Policy: defaultPolicy(d)}
	pol := &p.Policy

	p.Name = f.str("name", true)
	if f.err == nil && !namePattern.MatchString(p.Name) {
		f.fail("name", "%q is not a name: use up to 64 letters, digits, '.', '_', '@' and '-', starting with a letter or digit", p.Name)
	}
	p.Org = f.str("org", false)
	if f.err == nil && (len(p.Org) > 128 || strings.IndexFunc(p.Org, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0) {
		f.fail("org", "use at most 128 printable characters")
	}
	if h := f.str("token_sha256", true); f.err == nil {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 32 {
			f.fail("token_sha256", "%q is not a SHA-256: give the 64 hex digits of the token's SHA-256 (printf %%s TOKEN | sha256sum), never the token itself", truncate(h, 80))
		} else {
			copy(p.token[:], b)
		}
	}
	if langs, ok := f.list("languages"); ok {
		pol.Languages = nil
		for _, l := range langs {
			canon, err := sandbox.CanonicalLanguage(l)
			switch {
			case err != nil:
				f.fail("languages", "%q is not a language: use python, javascript or bash", truncate(l, 40))
			case !slices.Contains(d.Languages, canon):
				f.fail("languages", "%s is not among the server's languages (CODE_EXEC_LANGUAGES=%s)", canon, strings.Join(d.Languages, ","))
			case !slices.Contains(pol.Languages, canon):
				pol.Languages = append(pol.Languages, canon)
			}
		}
		if f.err == nil && len(pol.Languages) == 0 {
			f.fail("languages", "the list is empty: name at least one language")
		}
	}
	f.network(pol, d)
	if v, ok := f.scalar("files"); ok {
		switch Files(v) {
		case FilesNone, FilesRead, FilesWrite:
			pol.Files = Files(v)
		default:
			f.fail("files", "%q is not a file access: use none, ro or rw", truncate(v, 40))
		}
		if w := d.Workspace; w != nil && f.err == nil {
			switch {
			case pol.Files == FilesNone:
				f.fail("files", "none would keep the server's workspace (CODE_EXEC_WORKSPACE) from this principal's runs, and runs cannot be kept from it one by one: use ro or rw, or remove the workspace")
			case pol.Files == FilesRead && w.Writable:
				f.fail("files", "ro would make the server's writable workspace (CODE_EXEC_WORKSPACE_MODE=rw) read-only for this principal's runs, and runs cannot be given it read-only one by one: use rw, or make the workspace ro")
			}
		}
	}
	if v, ok := f.boolean("packages"); ok {
		if v && !d.Packages {
			f.fail("packages", "true is above the server's setting CODE_EXEC_PACKAGES=false")
		}
		pol.Packages = v
	}
	if v, ok := f.integer("max_sessions", 0, math.MaxInt32); ok {
		atMost(f, "max_sessions", v, d.MaxSessions, "CODE_EXEC_MAX_SESSIONS")
		pol.MaxSessions = v
	}
	if v, ok := f.scalar("approval"); ok {
		a, err := approvals.ParsePolicy(v)
		switch {
		case err != nil:
			f.fail("approval", "%q is not a policy: use always, risky or never", truncate(v, 40))
		case strictness(a) < strictness(d.Approval):
			f.fail("approval", "%s asks a person less often than the server's CODE_EXEC_APPROVAL=%s, which is the least every principal gets", a, d.Approval)
		case a != approvals.PolicyNever && !d.ApprovalAvailable:
			f.fail("approval", "%s needs a person to answer, and this server can ask nobody: approvals were off when it started (they are on when CODE_EXEC_APPROVAL is not never or a principal of the file asks for approval), or it serves no approvals console (CODE_EXEC_ADMIN_ADDR=off) and no client's answer counts; restart it with this file", a)
		}
		pol.Approval = a
	}
	if v, ok := f.duration("max_timeout"); ok {
		atMost(f, "max_timeout", v, d.MaxTimeout, "CODE_EXEC_MAX_TIMEOUT")
		pol.MaxTimeout = v
	}
	if v, ok := f.bytes("memory"); ok {
		switch {
		case v < minMemory:
			f.fail("memory", "%s is below the least a run may have, 32m", f.raw("memory"))
		case v > d.Memory:
			f.fail("memory", "%s is above the server's cap CODE_EXEC_MEMORY (%d bytes)", f.raw("memory"), d.Memory)
		}
		pol.Memory = v
	}
	if v, ok := f.number("cpus"); ok {
		if !(v > 0) {
			f.fail("cpus", "%g is not a number of CPUs above 0", v)
		}
		atMost(f, "cpus", v, d.CPUs, "CODE_EXEC_CPUS")
		pol.CPUs = v
	}
	if v, ok := f.integer("max_concurrent", 1, math.MaxInt32); ok {
		atMost(f, "max_concurrent", v, d.MaxConcurrency, "CODE_EXEC_MAX_CONCURRENCY")
		pol.MaxConcurrent = v
	}
	if v, ok := f.integer("runs_per_minute", 1, maxRunsPerMinute); ok {
		pol.RunsPerMinute = v
	}
	if f.err != nil {
		return nil, f.err
	}
	// The fields it set itself, but its name, org and token, which have
	// no server-wide setting.
	for _, field := range f.own {
		if !slices.Contains([]string{"name", "org", "token_sha256"}, field) {
			pol.own = append(pol.own, field)
		}
	}
	return p, nil
}

// network reads network and network_allow.
func (f *fieldReader) network(pol *Policy, d Defaults) {
	mode, hasMode := f.scalar("network")
	entries, hasAllow := f.list("network_allow")
	if f.err != nil {
		return
	}
	if hasMode {
		switch mode {
		case "none":
			pol.Network = &egress.Allowlist{}
			if hasAllow {
				f.fail("network_allow", "network is none, so there is nothing to allow: remove network_allow, or set network: allowlist")
			}
			return
		case "allowlist":
			if d.Allowlist == nil {
				f.fail("network", "allowlist is above the server's setting CODE_EXEC_NETWORK=none")
				return
			}
		default:
			f.fail("network", "%q is not a network policy: use none or allowlist", truncate(mode, 40))
			return
		}
	}
	if !hasAllow {
		return
	}
	if d.Allowlist == nil {
		f.fail("network_allow", "the server's CODE_EXEC_NETWORK is none, so runs reach nothing: remove network_allow")
		return
	}
	if len(entries) == 0 {
		f.fail("network_allow", "the list is empty: to allow nothing, set network: none")
		return
	}
	allow, err := egress.ParseAllowlist(entries)
	if err != nil {
		f.fail("network_allow", "%s", err.Error())
		return
	}
	for _, r := range allow.Rules() {
		if !d.Allowlist.Covers(r) {
			f.fail("network_allow", "%s is not within the server's allowlist CODE_EXEC_NETWORK_ALLOW=%s", r, strings.Join(d.Allowlist.Strings(), ","))
			return
		}
	}
	pol.Network = allow
}

// strictness orders approval policies from the one that asks least.
func strictness(p approvals.Policy) int {
	switch p {
	case approvals.PolicyNever:
		return 0
	case approvals.PolicyRisky:
		return 1
	}
	return 2
}

// fieldReader reads the fields of one principal, keeping the first error.
type fieldReader struct {
	who  string
	line int
	vals map[string]*yaml.Node
	err  error
	// own lists the fields given (see Policy.Own).
	own []string
}

func (f *fieldReader) fail(field, format string, a ...any) {
	if f.err != nil {
		return
	}
	line := f.line
	if n := f.vals[field]; n != nil {
		line = n.Line
	}
	f.err = &fieldError{f.who, line, field, fmt.Sprintf(format, a...)}
}

// given records that the principal set field itself.
func (f *fieldReader) given(field string) {
	if !slices.Contains(f.own, field) {
		f.own = append(f.own, field)
	}
}

// atMost refuses v above the server-wide cap of field: setting, whose
// value is limit.
func atMost[T int | float64 | time.Duration](f *fieldReader, field string, v, limit T, setting string) {
	if v > limit {
		f.fail(field, "%v is above the server's cap %s=%v", v, setting, limit)
	}
}

// raw is the field's text as written.
func (f *fieldReader) raw(field string) string {
	if n := f.vals[field]; n != nil {
		return n.Value
	}
	return ""
}

// scalar returns the field's scalar text, and whether it is given (a null
// value is not).
func (f *fieldReader) scalar(field string) (string, bool) {
	n := f.vals[field]
	if f.err != nil || n == nil || n.Tag == "!!null" {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		f.fail(field, "want a single value, not a %s", kindName(n))
		return "", false
	}
	f.given(field)
	return n.Value, true
}

// str returns a string field; required ones must be given and not empty.
func (f *fieldReader) str(field string, required bool) string {
	v, ok := f.scalar(field)
	if required && f.err == nil && (!ok || strings.TrimSpace(v) == "") {
		f.fail(field, "required, and missing or empty")
	}
	return strings.TrimSpace(v)
}

// list returns a list of strings.
func (f *fieldReader) list(field string) ([]string, bool) {
	n := f.vals[field]
	if f.err != nil || n == nil || n.Tag == "!!null" {
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		f.fail(field, "want a list such as [a, b], not a %s", kindName(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	for _, item := range n.Content {
		if item.Kind != yaml.ScalarNode {
			f.fail(field, "each entry must be a single value, not a %s", kindName(item))
			return nil, false
		}
		out = append(out, item.Value)
	}
	f.given(field)
	return out, true
}

// value reads a single-valued field with parse, which says whether the
// text is what the field wants (what, in the error: "a number").
func value[T any](f *fieldReader, field, what string, parse func(string) (T, bool)) (T, bool) {
	var zero T
	v, given := f.scalar(field)
	if !given {
		return zero, false
	}
	n, ok := parse(v)
	if !ok {
		f.fail(field, "%q is not %s", truncate(v, 40), what)
		return zero, false
	}
	return n, true
}

func (f *fieldReader) boolean(field string) (bool, bool) {
	return value(f, field, "true or false", func(s string) (bool, bool) {
		b, err := strconv.ParseBool(s)
		return b, err == nil && (strings.EqualFold(s, "true") || strings.EqualFold(s, "false"))
	})
}

func (f *fieldReader) integer(field string, lo, hi int) (int, bool) {
	return value(f, field, fmt.Sprintf("a whole number from %d to %d", lo, hi), func(s string) (int, bool) {
		n, err := strconv.Atoi(s)
		return n, err == nil && n >= lo && n <= hi
	})
}

func (f *fieldReader) number(field string) (float64, bool) {
	return value(f, field, "a number", func(s string) (float64, bool) {
		n, err := strconv.ParseFloat(s, 64)
		return n, err == nil && !math.IsNaN(n) && !math.IsInf(n, 0)
	})
}

func (f *fieldReader) duration(field string) (time.Duration, bool) {
	return value(f, field, "a duration above 0 such as 30s or 2m", func(s string) (time.Duration, bool) {
		d, err := time.ParseDuration(s)
		return d, err == nil && d > 0
	})
}

func (f *fieldReader) bytes(field string) (int64, bool) {
	return value(f, field, "a byte size such as 512m or 1g", func(s string) (int64, bool) {
		n, err := sandbox.ParseBytes(s)
		return n, err == nil
	})
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.AliasNode:
		return "alias"
	}
	return "value"
}

// oneLine joins the lines of a library's message.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
