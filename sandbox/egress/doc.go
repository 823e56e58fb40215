// Package egress is what a sandboxed run may reach when
// CODE_EXEC_NETWORK=allowlist: the operator's allowlist, the rules for
// addresses (loopback, private, cloud metadata), pinned names, the caps, and
// the report of what a run reached and what was refused. The proxy that
// enforces it is package egress/proxy.
//
// This package needs no HTTP stack, so that the sandbox's result types can
// name it without the run helpers (sandbox/internal/executor), which start
// with every run, paying for net/http's initialisation.
package egress
