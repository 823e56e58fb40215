// Package approvals decides whether a person must approve a run before it
// starts, and asks them.
//
// The pieces:
//   - Policy (never, always, risky) and Assess, a per-language risk check
//     whose reasons are shown to the approver, with AssessInputs, the same
//     check of a run's files and stdin (the code can run them). The risk
//     check is a triage aid, not a security boundary: code can hide what it
//     does.
//   - Visible, how every view of a request (the console, the CLI, the
//     elicitation message) shows text: characters that do not show as
//     themselves (Hidden) escaped as their code point.
//   - Broker, the pending requests that the approvals console and the
//     codeexec approvals CLI list and answer (the first answer wins, and no
//     answer by the deadline is a denial).
//   - Gate, a sandbox.Runner that, when the policy requires it, waits for a
//     decision on its Broker and from the Approver of the request's Call
//     (carried by its context: WithCall; the MCP server supplies one that
//     asks through the client) before it calls the next Runner, and records
//     every request and decision through a Recorder (approvals/audit keeps
//     the tamper-evident log).
//   - Signer, which the Gate uses to bind an approval that round-trips
//     through an MCP client (a multi-round-trip input request) to the exact
//     request that was shown, once, until it expires.
package approvals

import (
	"fmt"
	"strings"
)

// Policy says which runs need a person's approval. Its values are the
// accepted values of CODE_EXEC_APPROVAL.
type Policy string

// The policies.
const (
	// PolicyNever runs everything without asking (the default).
	PolicyNever Policy = "never"
	// PolicyAlways asks before every run.
	PolicyAlways Policy = "always"
	// PolicyRisky asks only when the risk check flags the code.
	PolicyRisky Policy = "risky"
)

// ParsePolicy returns the Policy named s, or an error that lists the accepted values.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(strings.ToLower(strings.TrimSpace(s))); p {
	case PolicyNever, PolicyAlways, PolicyRisky:
		return p, nil
	}
	return "", fmt.Errorf("unknown approval policy %q (accepted: never, always, risky)", s)
}

// UnmarshalText implements encoding.TextUnmarshaler so that configuration
// parsing rejects an unknown policy.
func (p *Policy) UnmarshalText(b []byte) error {
	v, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Requires reports whether a run whose risk check found findings needs a
// person's approval under p. An unknown policy requires approval (fail
// closed). Notes that the code will be refused anyway (CategoryRefused) do
// not count as risks.
func (p Policy) Requires(findings []Finding) bool {
	switch p {
	case PolicyNever:
		return false
	case PolicyRisky:
		for _, f := range findings {
			if f.Category != CategoryRefused {
				return true
			}
		}
		return false
	}
	return true
}
