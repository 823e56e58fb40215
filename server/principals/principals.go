// Package principals says who calls codeexec and what each caller may do.
//
// A Principal is one caller: a name, an organisation and the Policy in
// force for it (languages, network, files, packages, sessions, approval,
// timeout, memory and CPU, concurrent runs, runs per minute). Without
// CODE_EXEC_PRINCIPALS_FILE there is one: "local" over stdio (and over
// HTTP without a token), "default" over HTTP with CODE_EXEC_AUTH_TOKEN,
// each with the server-wide settings. With the file (Parse), each bearer
// token is someone: the HTTP transports find the principal of a request
// by the SHA-256 of its token (Registry.Authenticate, constant time), and
// what a principal does not set falls back to the server-wide setting
// (Defaults). A principal is never given more than the server-wide caps:
// a file that tries is refused, naming the principal and the field.
//
// The pieces:
//   - Registry holds the principals in force, and replaces them when the
//     file is reloaded (Reload on SIGHUP, Watch on change); a bad file
//     keeps the previous principals and says why. A request holds the
//     Principal it was authenticated as until it ends, so a reload never
//     changes a run in flight.
//   - WithPrincipal and From carry the caller's Principal in a request's
//     context, for the layers of the runner chain, the audit record and
//     the metrics.
//   - Guard is the runner chain's layer that enforces a principal's policy
//     on each request: what it may ask for (a *RefusedError otherwise),
//     what its runs may reach (sandbox.Request.Network), and its
//     concurrency and rate (a *LimitedError, with when to retry, that
//     never slows another principal).
package principals

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// The names of the built-in principals.
const (
	// LocalName is the principal of stdio, and of HTTP without any token
	// (loopback only): the person on this machine.
	LocalName = "local"
	// DefaultName is the principal of HTTP with CODE_EXEC_AUTH_TOKEN only.
	DefaultName = "default"
)

// Files says what a principal's runs may do with files: the values of a
// principal's files field.
type Files string

// The file access levels.
const (
	// FilesNone: no files in (code_execute's files argument), no
	// artifacts out, no workspace.
	FilesNone Files = "none"
	// FilesRead: files in, the workspace read-only, no artifacts out.
	FilesRead Files = "ro"
	// FilesWrite: files in, artifacts out, the workspace as the server
	// gives it (the server-wide setting).
	FilesWrite Files = "rw"
)

// Defaults are the server-wide settings: what a principal that sets
// nothing gets, and the caps no principal may exceed.
type Defaults struct {
	// Languages are the languages that may run (CODE_EXEC_LANGUAGES).
	Languages []string
	// Allowlist is the operator's network allowlist
	// (CODE_EXEC_NETWORK=allowlist, CODE_EXEC_NETWORK_ALLOW); nil when
	// runs have no network (CODE_EXEC_NETWORK=none).
	Allowlist *egress.Allowlist
	// Workspace is the operator's project folder (CODE_EXEC_WORKSPACE),
	// nil for none.
	Workspace *sandbox.Workspace
	// Packages: code_execute's packages argument is accepted
	// (CODE_EXEC_PACKAGES).
	Packages bool
	// MaxSessions is CODE_EXEC_MAX_SESSIONS.
	MaxSessions int
	// Approval is CODE_EXEC_APPROVAL.
	Approval approvals.Policy
	// ApprovalAvailable: a person can be asked (the approvals console is
	// served, or the clients' elicitation answers count). Without it no
	// principal may be given a policy that asks.
	ApprovalAvailable bool
	// MaxTimeout is CODE_EXEC_MAX_TIMEOUT.
	MaxTimeout time.Duration
	// Memory and CPUs are CODE_EXEC_MEMORY and CODE_EXEC_CPUS.
	Memory int64
	CPUs   float64
	// MaxConcurrency is CODE_EXEC_MAX_CONCURRENCY.
	MaxConcurrency int
}

// Policy is what a principal may do, every field resolved: the
// principal's own setting, or the server-wide one it falls back to.
type Policy struct {
	// Languages are the languages its code may be written in.
	Languages []string
	// Network is what its runs may reach through the egress proxy: nil for
	// the operator's whole allowlist (or no network, when the server has
	// none), an empty allowlist for nothing, or a subset of the operator's.
	Network *egress.Allowlist
	// Files is what its runs may do with files.
	Files Files
	// Packages: it may name packages.
	Packages bool
	// MaxSessions is how many sessions it may hold at once (0: none).
	MaxSessions int
	// Approval is when its code waits for a person.
	Approval approvals.Policy
	// MaxTimeout is the most a run of its may take; DefaultTimeout is
	// what a run that asks for none gets (at most MaxTimeout).
	MaxTimeout time.Duration
	// Memory and CPUs are its runs' memory and CPU limits.
	Memory int64
	CPUs   float64
	// MaxConcurrent caps its requests in flight (0: only the server's
	// CODE_EXEC_MAX_CONCURRENCY); RunsPerMinute its runs started in any
	// minute (0: no cap).
	MaxConcurrent int
	RunsPerMinute int

	// own lists the fields the principal set itself (file keys).
	own []string
}

// Own reports whether the principal set field (its key in the file, such
// as "max_timeout") itself, rather than taking the server-wide setting.
func (p Policy) Own(field string) bool { return slices.Contains(p.own, field) }

// Principal is one caller of codeexec. It is immutable: a reload makes new
// Principals and leaves the ones that requests hold alone.
type Principal struct {
	// Name identifies it (unique); it names its runs in logs, the audit
	// record, the approvals console and the metrics.
	Name string
	// Org is its organisation ("" when not given).
	Org string
	// Policy is what it may do.
	Policy Policy
	// token is the SHA-256 of its bearer token (zero for the principal of
	// clients without one).
	token [32]byte
}

// String names the principal for people: "analytics-agent (acme)".
func (p *Principal) String() string {
	if p.Org == "" {
		return p.Name
	}
	return p.Name + " (" + p.Org + ")"
}

// Nobody is the principal of a request that names none: it may run
// nothing (no language), hold no session, and has no limits to give.
var Nobody = &Principal{Name: "nobody", Policy: Policy{Files: FilesNone}}

// Builtin returns a principal with the server-wide settings and no limits
// of its own: LocalName's or DefaultName's.
func Builtin(name string, d Defaults) *Principal {
	return &Principal{Name: name, Policy: defaultPolicy(d)}
}

// defaultPolicy is the policy of a principal that sets nothing.
func defaultPolicy(d Defaults) Policy {
	return Policy{
		Languages:   slices.Clone(d.Languages),
		Files:       FilesWrite,
		Packages:    d.Packages,
		MaxSessions: d.MaxSessions,
		Approval:    d.Approval,
		MaxTimeout:  d.MaxTimeout,
		Memory:      d.Memory,
		CPUs:        d.CPUs,
	}
}

// Key is the key of the principal's own things that are not an MCP
// client's: its sessions' quota, and what its clients without an MCP
// session (protocol 2026-07-28) own.
func (p *Principal) Key() string { return "principal:" + p.Name }

// Limits are the limits of its runs: the server's, with its memory, CPUs
// and, when its own cap is lower, the default timeout.
func (p *Principal) Limits(server sandbox.Limits) sandbox.Limits {
	server.MemoryBytes, server.CPUs = p.Policy.Memory, p.Policy.CPUs
	if server.Timeout > p.Policy.MaxTimeout {
		server.Timeout = p.Policy.MaxTimeout
	}
	return server
}

// SessionQuota caps its sessions, when it sets max_sessions (the server's
// CODE_EXEC_MAX_SESSIONS caps them otherwise).
func (p *Principal) SessionQuota() sandbox.SessionQuota {
	if !p.Policy.Own("max_sessions") {
		return sandbox.SessionQuota{}
	}
	return sandbox.SessionQuota{Key: p.Key(), Max: p.Policy.MaxSessions, Setting: fmt.Sprintf("principal %s's max_sessions", p.Name)}
}

// Describe says in one line what the principal may do, for logs.
func (p *Principal) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "languages %s, network %s, files %s, packages %t, max_sessions %d, approval %s, max_timeout %s, memory %s, cpus %g",
		strings.Join(p.Policy.Languages, ","), p.NetworkName(), p.Policy.Files, p.Policy.Packages, p.Policy.MaxSessions,
		p.Policy.Approval, p.Policy.MaxTimeout, artifacts.FormatBytes(p.Policy.Memory), p.Policy.CPUs)
	if n := p.Policy.MaxConcurrent; n > 0 {
		fmt.Fprintf(&b, ", max_concurrent %d", n)
	}
	if n := p.Policy.RunsPerMinute; n > 0 {
		fmt.Fprintf(&b, ", runs_per_minute %d", n)
	}
	return b.String()
}

// NetworkName says what its runs may reach: "none", "the server's
// allowlist" or its own entries.
func (p *Principal) NetworkName() string {
	switch n := p.Policy.Network; {
	case n == nil:
		return "the server's"
	case len(n.Rules()) == 0:
		return "none"
	default:
		return "allowlist " + strings.Join(n.Strings(), ",")
	}
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p, the caller of the request.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// From returns the Principal that ctx carries, or nil.
func From(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}
