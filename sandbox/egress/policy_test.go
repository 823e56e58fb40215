package egress_test

import (
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress"
)

func TestProxyEnv(t *testing.T) {
	t.Parallel()
	got := strings.Join(egress.ProxyEnv("127.0.0.1:3128"), " ")
	want := "HTTP_PROXY=http://127.0.0.1:3128 HTTPS_PROXY=http://127.0.0.1:3128 http_proxy=http://127.0.0.1:3128 https_proxy=http://127.0.0.1:3128 NO_PROXY= no_proxy="
	if got != want {
		t.Fatalf("ProxyEnv = %q", got)
	}
}
