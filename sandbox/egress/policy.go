package egress

import (
	"fmt"
	"strings"
	"time"
)

// Caps bound one run's use of the network. A zero field means no cap of
// that kind; the server always fills every field.
type Caps struct {
	// Connections caps the connections the run opens to destinations.
	Connections int
	// Bytes caps the bytes sent and received, all destinations together.
	Bytes int64
	// ConnectTimeout bounds name resolution plus connecting.
	ConnectTimeout time.Duration
	// IdleTimeout closes a connection on which nothing moved for that long.
	IdleTimeout time.Duration
}

// Policy is what a run may reach.
type Policy struct {
	Allow *Allowlist
	// AllowPrivate lets runs reach the ranges of Ranges refused
	// UnlessPrivate: loopback, private (RFC 1918, ULA), CGNAT,
	// link-local, benchmarking, local-use NAT64 and cloud metadata. The
	// ranges refused Always (unspecified, documentation, reserved,
	// multicast, ...) stay refused.
	AllowPrivate bool
	// Resolver resolves names; nil means the system's resolver.
	Resolver Resolver
	Caps     Caps
}

// PolicyInfo describes a policy to operators and models (sandbox_info,
// the audit record).
type PolicyInfo struct {
	// Allow lists the allowlist entries, each as it parses back.
	Allow []string `json:"allow"`
	// AllowPrivate: the ranges refused unless private addresses are
	// allowed (loopback, private, CGNAT, link-local, ...) may be reached.
	AllowPrivate bool `json:"allow_private"`
	// Enforced: the sandbox sends every connection of a run through the
	// proxy. In mode none programs are only pointed at it.
	Enforced bool `json:"enforced" jsonschema:"false in mode none: programs are pointed at the proxy but can bypass it."`
	// Proxy is the address programs find the proxy at (HTTP_PROXY).
	Proxy                 string  `json:"proxy,omitempty"`
	MaxConnections        int     `json:"max_connections" schema:"optional"`
	MaxBytes              int64   `json:"max_bytes" schema:"optional"`
	ConnectTimeoutSeconds float64 `json:"connect_timeout_seconds" schema:"optional"`
	IdleTimeoutSeconds    float64 `json:"idle_timeout_seconds" schema:"optional"`
}

// Info describes the policy; enforced and proxy are the sandbox's to say.
func (pol Policy) Info(enforced bool, proxy string) *PolicyInfo {
	return &PolicyInfo{
		Allow:                 pol.Allow.Strings(),
		AllowPrivate:          pol.AllowPrivate,
		Enforced:              enforced,
		Proxy:                 proxy,
		MaxConnections:        pol.Caps.Connections,
		MaxBytes:              pol.Caps.Bytes,
		ConnectTimeoutSeconds: pol.Caps.ConnectTimeout.Seconds(),
		IdleTimeoutSeconds:    pol.Caps.IdleTimeout.Seconds(),
	}
}

// ProxyEnv returns the environment that points a program's HTTP clients at
// a proxy listening on addr (host:port): HTTP_PROXY, HTTPS_PROXY, their
// lower-case forms, NO_PROXY empty so that nothing bypasses it, and
// NODE_USE_ENV_PROXY=1, with which Node.js's built-in fetch and http read
// them where its version can (see ProxyClients).
func ProxyEnv(addr string) []string {
	u := "http://" + addr
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u,
		"http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=", "no_proxy=",
		"NODE_USE_ENV_PROXY=1",
	}
}

// NodeProxySupport says which of Node.js's built-in clients use the proxy
// variables with NODE_USE_ENV_PROXY=1 in a version of Node.js ("20.20.2"):
// fetch from 24.0 and 22.21, the http and https modules from 24.5 and
// 22.21; neither before, nor in 23.
func NodeProxySupport(version string) (fetch, httpModules bool) {
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(version, "v"), "%d.%d", &major, &minor); err != nil {
		return false, false
	}
	switch {
	case major >= 25:
		return true, true
	case major == 24:
		return true, minor >= 5
	case major == 22 && minor >= 21:
		return true, true
	}
	return false, false
}

// ProxyClients says, in a sentence for models and operators, which
// programs send their requests through the proxy that ProxyEnv names, given
// the version of the runs' Node.js ("" when javascript cannot run).
func ProxyClients(node string) string {
	s := "python's urllib, requests and pip, curl and wget use HTTP_PROXY/HTTPS_PROXY by themselves"
	if node == "" {
		return s
	}
	switch fetch, httpModules := NodeProxySupport(node); {
	case fetch && httpModules:
		return s + ", and so do Node.js " + node + "'s fetch and http/https modules (NODE_USE_ENV_PROXY=1 is set)"
	case fetch:
		return s + ", and so does Node.js " + node + "'s fetch (NODE_USE_ENV_PROXY=1 is set), but not its http/https modules, which need an agent that uses the proxy"
	}
	return s + "; Node.js " + node + "'s fetch and http/https modules do not (that needs Node.js 22.21 or 24.5 and later), so a javascript program must send its requests through the proxy itself (an agent that uses HTTP_PROXY, or a CONNECT request to it)"
}
