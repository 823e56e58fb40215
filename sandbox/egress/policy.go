package egress

import "time"

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
// lower-case forms, and NO_PROXY empty so that nothing bypasses it.
func ProxyEnv(addr string) []string {
	u := "http://" + addr
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u,
		"http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=", "no_proxy=",
	}
}
