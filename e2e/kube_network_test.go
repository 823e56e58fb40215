package e2e

import (
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestKubernetesNetworkAllowlist drives CODE_EXEC_NETWORK=allowlist through
// the real binary in kubernetes mode: the run's pod keeps its deny-all
// network and reaches codeexec's egress proxy through the relay carried by
// an exec stream of its own. The destinations are listeners this test
// starts on one of this host's own addresses, or loopback (the proxy, in
// the server, connects to them; a raw socket from the pod must not), and
// every name is pinned: nothing leaves the machine and nothing asks DNS.
// Raw sockets to the pod's loopback and this host's address must fail.
// Two runs: the first on the warm pod made at start, the second on the pod
// the pool made after it or a cold one.
func TestKubernetesNetworkAllowlist(t *testing.T) {
	ip := sandboxtest.HostListenerIP()
	e := sandboxtest.StartEgress(t, ip)
	cs, _ := connect(t, stdio, kubeEnv(t, map[string]string{
		"CODE_EXEC_LANGUAGES":             "python",
		"CODE_EXEC_NETWORK":               "allowlist",
		"CODE_EXEC_NETWORK_ALLOW":         strings.Join(e.Allow(), ","),
		"CODE_EXEC_NETWORK_RESOLVE":       e.Resolve(),
		"CODE_EXEC_NETWORK_ALLOW_PRIVATE": "true",
		"CODE_EXEC_TIMEOUT":               "60s",
	}), connectOpts{})
	for range 2 {
		checkAllowlistServer(t, cs, e, sandboxtest.RawTargets(ip))
	}
}
