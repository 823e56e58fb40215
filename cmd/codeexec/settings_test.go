package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/configs"
)

func load(t *testing.T, env ...string) *configs.Config {
	t.Helper()
	c, err := configs.Load(env)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A UID range that process mode refuses stops the server at start as a
// configuration error naming the setting, whatever the mode.
func TestUIDRangeIsCheckedAtStart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  string
		want string
	}{
		{"CODE_EXEC_PROCESS_UID_RANGE=60000-70000", "65534"},
		{"CODE_EXEC_PROCESS_UID_RANGE=0-10", "between 1 and 4294967294"},
		{"CODE_EXEC_PROCESS_UID_RANGE=300-200", "above the last"},
	} {
		var stdout, stderr bytes.Buffer
		cfg, status := configure(nil, []string{c.env, "CODE_EXEC_SANDBOX=docker"}, &stdout, &stderr)
		msg := stderr.String()
		if cfg != nil || status != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "CODE_EXEC_PROCESS_UID_RANGE=") || !strings.Contains(msg, c.want) || !strings.Contains(msg, "FIRST-LAST") {
			t.Errorf("%s: status %d, stderr %q; want 2 and one line naming the setting and %q", c.env, status, msg, c.want)
		}
	}
	if _, err := uidRange(load(t)); err != nil {
		t.Errorf("the default range: %v", err)
	}
}

func TestEgressPolicy(t *testing.T) {
	t.Parallel()
	if _, on := egressPolicy(load(t)); on {
		t.Fatal("a policy with CODE_EXEC_NETWORK=none")
	}
	p, on := egressPolicy(load(t, "CODE_EXEC_NETWORK=allowlist", "CODE_EXEC_NETWORK_ALLOW=pypi.org,*.example.com:8443",
		"CODE_EXEC_NETWORK_RESOLVE=pypi.org=127.0.0.1", "CODE_EXEC_NETWORK_MAX_BYTES=1m"))
	if !on || len(p.Allow.Rules()) != 2 || p.AllowPrivate || p.Caps.Bytes != 1<<20 || p.Caps.Connections != 64 {
		t.Fatalf("policy = %+v (on: %v)", p, on)
	}
}

func TestPackagesPolicyAndLimits(t *testing.T) {
	t.Parallel()
	c := load(t, "CODE_EXEC_PACKAGES=true", "CODE_EXEC_PIP_INDEX_URL=http://127.0.0.1:8080/simple/", "CODE_EXEC_NPM_REGISTRY=https://registry.example.org/")
	pol, err := packagesPolicy(c)
	if err != nil || !slices.Equal(pol.Allow.Strings(), []string{"127.0.0.1:8080", "registry.example.org:443"}) || !pol.AllowPrivate {
		t.Errorf("install policy %v %v", pol.Allow.Strings(), err)
	}
	c = load(t, "CODE_EXEC_PACKAGES=true", "CODE_EXEC_PIP_INDEX_URL=https://index.example.org/simple/", "CODE_EXEC_PACKAGES_ALLOW=files.example.org")
	if pol, err := packagesPolicy(c); err != nil || !slices.Equal(pol.Allow.Strings(), []string{"index.example.org:443", "files.example.org"}) {
		t.Errorf("install policy with CODE_EXEC_PACKAGES_ALLOW: %v %v", pol.Allow.Strings(), err)
	}
	if l := packagesLimits(c); l.Timeout != c.PackagesTimeout || l.FileSizeBytes != int64(c.PackagesMaxBytes) || l.MemoryBytes < 1<<30 {
		t.Errorf("install limits %+v", l)
	}
}

func TestPythonPolicy(t *testing.T) {
	t.Parallel()
	p := pythonPolicy(load(t, "CODE_EXEC_PYTHON_ALLOWED_IMPORTS= math, json,math,,"))
	if !slices.Equal(p.AllowedImports, []string{"math", "json"}) {
		t.Errorf("allowed imports %q, want math and json once each", p.AllowedImports)
	}
}

// TestUnknownSettings: a name that looks like a setting but is none stops
// the server with status 2 and one line that names it and the setting
// meant; the subcommands warn about it the same way on stderr and go on.
func TestUnknownSettings(t *testing.T) {
	t.Parallel()
	typo := configs.Prefix + "SANDBOX_MODE=docker"
	var stdout, stderr bytes.Buffer
	status := run(nil, []string{typo}, strings.NewReader(""), &stdout, &stderr)
	want := configs.Prefix + "SANDBOX_MODE is not a codeexec setting: did you mean CODE_EXEC_SANDBOX?"
	if status != 2 || stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "codeexec: configuration error: "+want) {
		t.Errorf("server: status %d, stdout %q, stderr %q; want 2, nothing and one line saying %q", status, stdout.String(), stderr.String(), want)
	}

	f := newAdminFixture(t, testAdminToken)
	admin := []string{"CODE_EXEC_ADMIN_ADDR=" + strings.TrimPrefix(f.srv.URL, "http://"), "CODE_EXEC_ADMIN_TOKEN=" + testAdminToken}
	for _, c := range []struct {
		args   []string
		env    []string
		status int
		out    string
	}{
		{[]string{"approvals", "list"}, append([]string{"CODEEXEC_ADMIN_TOKEN=x"}, admin...), 0, "codeexec approvals: warning: CODEEXEC_ADMIN_TOKEN is not a codeexec setting: did you mean CODE_EXEC_ADMIN_TOKEN?"},
		{[]string{"token", "verify", "x.y.z"}, []string{configs.Prefix + "RUN_TOKEN_KY=0123456789abcdef0123456789abcdef"}, 2, "codeexec token: warning: " + configs.Prefix + "RUN_TOKEN_KY is not a codeexec setting: did you mean CODE_EXEC_RUN_TOKEN_KEY?"},
		{[]string{"audit", "verify", filepath.Join(t.TempDir(), "none.jsonl")}, []string{typo}, 1, "codeexec audit: warning: " + want},
	} {
		stdout.Reset()
		stderr.Reset()
		status := run(c.args, c.env, strings.NewReader(""), &stdout, &stderr)
		if lines := strings.Split(stderr.String(), "\n"); status != c.status || lines[0] != c.out+" (codeexec --help lists every setting)" {
			t.Errorf("%q: status %d, stderr %q; want %d and first the line %q", c.args, status, stderr.String(), c.status, c.out)
		}
	}
}
