package egress_test

import (
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress"
)

func TestProxyEnv(t *testing.T) {
	t.Parallel()
	got := strings.Join(egress.ProxyEnv("127.0.0.1:3128"), " ")
	want := "HTTP_PROXY=http://127.0.0.1:3128 HTTPS_PROXY=http://127.0.0.1:3128 http_proxy=http://127.0.0.1:3128 https_proxy=http://127.0.0.1:3128 NO_PROXY= no_proxy= NODE_USE_ENV_PROXY=1"
	if got != want {
		t.Fatalf("ProxyEnv = %q", got)
	}
}

func TestNodeProxySupport(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		version     string
		fetch, http bool
	}{
		{"18.20.4", false, false}, {"20.20.2", false, false}, {"22.20.0", false, false}, {"22.21.0", true, true},
		{"v22.23.3", true, true}, {"23.11.1", false, false}, {"24.0.0", true, false}, {"24.4.1", true, false},
		{"24.5.0", true, true}, {"26.10.0", true, true}, {"", false, false}, {"x", false, false},
	} {
		if fetch, http := egress.NodeProxySupport(c.version); fetch != c.fetch || http != c.http {
			t.Errorf("NodeProxySupport(%q) = %v, %v; want %v, %v", c.version, fetch, http, c.fetch, c.http)
		}
	}
}
