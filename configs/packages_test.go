package configs

import (
	"strings"
	"testing"
)

func TestPackagesSettings(t *testing.T) {
	t.Parallel()
	c, err := Load(nil)
	if err != nil || c.Packages {
		t.Fatalf("default: packages %v, %v", c.Packages, err)
	}
	c, err = Load([]string{"CODE_EXEC_PACKAGES=true", "CODE_EXEC_PIP_INDEX_URL=http://127.0.0.1:8080/simple/", "CODE_EXEC_NPM_REGISTRY=https://registry.example.org/"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Packages || c.PipIndexURL != "http://127.0.0.1:8080/simple/" || c.NpmRegistry != "https://registry.example.org/" {
		t.Errorf("packages settings: on %v, pip %q, npm %q", c.Packages, c.PipIndexURL, c.NpmRegistry)
	}
	for _, bad := range []struct {
		env  []string
		want string
	}{
		{[]string{"CODE_EXEC_PACKAGES=true"}, "needs CODE_EXEC_PIP_INDEX_URL, CODE_EXEC_NPM_REGISTRY or both"},
		{[]string{"CODE_EXEC_PIP_INDEX_URL=http://x/simple/"}, "CODE_EXEC_PIP_INDEX_URL is set but CODE_EXEC_PACKAGES=false"},
		{[]string{"CODE_EXEC_PACKAGES=true", "CODE_EXEC_NPM_REGISTRY=https://x/", "CODE_EXEC_PACKAGES_ALLOW=bad host"}, "CODE_EXEC_PACKAGES_ALLOW"},
		{[]string{"CODE_EXEC_PACKAGES=true", "CODE_EXEC_PIP_INDEX_URL=ftp://x/"}, "CODE_EXEC_PIP_INDEX_URL=ftp://x/ is not valid"},
		{[]string{"CODE_EXEC_PACKAGES=true", "CODE_EXEC_NPM_REGISTRY=https://u:p@x/"}, "CODE_EXEC_NPM_REGISTRY"},
		{[]string{"CODE_EXEC_PACKAGES=true", "CODE_EXEC_NPM_REGISTRY=https://x/", "CODE_EXEC_PACKAGES_CACHE_DIR=relative"}, "CODE_EXEC_PACKAGES_CACHE_DIR=relative is not valid"},
		{[]string{"CODE_EXEC_PACKAGES=true", "CODE_EXEC_NPM_REGISTRY=https://x/", "CODE_EXEC_PACKAGES_TIMEOUT=0s"}, "CODE_EXEC_PACKAGES_TIMEOUT"},
		{[]string{"CODE_EXEC_PACKAGES=true", "CODE_EXEC_NPM_REGISTRY=https://x/", "CODE_EXEC_PACKAGES_MAX_BYTES=4g"}, "CODE_EXEC_PACKAGES_MAX_BYTES"},
	} {
		if _, err := Load(bad.env); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error with %q", bad.env, err, bad.want)
		}
	}
}
