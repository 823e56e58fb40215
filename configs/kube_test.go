package configs

import (
	"strings"
	"testing"
)

func TestKubernetesSettings(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{"CODE_EXEC_SANDBOX=kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	if c.K8sNamespace != "codeexec-runs" || c.K8sImage != "" || c.K8sPoolSize != 2 || c.K8sNetworkCheck != "refuse" || c.K8sRuntimeClass != "" || c.K8sUserNamespaces {
		t.Fatalf("kubernetes defaults: %+v", c)
	}
	c, err = Load([]string{"CODE_EXEC_SANDBOX=kubernetes", "CODE_EXEC_K8S_IMAGE=registry.example/sandbox@sha256:00", "CODE_EXEC_K8S_NETWORK_CHECK_ADDRS=10.0.0.5:5432,[fd00::1]:80"})
	if err != nil || c.K8sImage != "registry.example/sandbox@sha256:00" || len(c.K8sNetworkCheckAddrs) != 2 {
		t.Fatalf("explicit settings: %v %v", c, err)
	}
	// The network allowlist reaches pods through a relay of their own.
	c, err = Load([]string{"CODE_EXEC_SANDBOX=kubernetes", "CODE_EXEC_NETWORK=allowlist", "CODE_EXEC_NETWORK_ALLOW=a.example"})
	if err != nil || c.Network != NetworkAllowlist {
		t.Fatalf("CODE_EXEC_NETWORK=allowlist in kubernetes mode: %v", err)
	}
	for _, tt := range []struct {
		env  []string
		want []string
	}{
		{[]string{"CODE_EXEC_SANDBOX=kubernetes", "CODE_EXEC_PACKAGES=true", "CODE_EXEC_PIP_INDEX_URL=http://127.0.0.1:1/simple/"}, []string{"CODE_EXEC_PACKAGES=true is not available with CODE_EXEC_SANDBOX=kubernetes"}},
		{[]string{"CODE_EXEC_SANDBOX=kubernetes", "CODE_EXEC_WORKSPACE=/"}, []string{"CODE_EXEC_WORKSPACE is not available with CODE_EXEC_SANDBOX=kubernetes"}},
		{[]string{"CODE_EXEC_K8S_NAMESPACE=Runs_Here"}, []string{"CODE_EXEC_K8S_NAMESPACE", `"Runs_Here"`, "namespace name"}},
		{[]string{"CODE_EXEC_K8S_POOL_SIZE=100"}, []string{"CODE_EXEC_K8S_POOL_SIZE", "0 to 64"}},
		{[]string{"CODE_EXEC_K8S_NETWORK_CHECK=ignore"}, []string{"CODE_EXEC_K8S_NETWORK_CHECK", "refuse or warn"}},
		{[]string{"CODE_EXEC_K8S_NETWORK_CHECK_ADDRS=db.example:5432"}, []string{"CODE_EXEC_K8S_NETWORK_CHECK_ADDRS", "db.example:5432", "IP address"}},
		{[]string{"CODE_EXEC_K8S_USER_NAMESPACES=sometimes"}, []string{"CODE_EXEC_K8S_USER_NAMESPACES", "true or false"}},
	} {
		_, err := Load(tt.env)
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Load(%q) error = %v, want it to mention %q", tt.env, err, w)
			}
		}
	}
}
