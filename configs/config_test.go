package configs

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
)

func TestDefaults(t *testing.T) {
	c, err := Load(nil)
	if err != nil {
		t.Fatalf("Load(nil): %v", err)
	}
	if c.Sandbox != sandbox.ModeProcess || c.Transport != TransportStdio || c.Addr != "127.0.0.1:8080" {
		t.Fatalf("defaults: sandbox=%q transport=%q addr=%q", c.Sandbox, c.Transport, c.Addr)
	}
	if c.Timeout != 10*time.Second || c.MaxTimeout != 60*time.Second || c.Memory != 256<<20 || c.MaxOutput != 1<<20 {
		t.Fatalf("limits defaults: %+v", c)
	}
	if strings.Join(c.Languages, ",") != "python,javascript,bash" {
		t.Fatalf("languages = %v", c.Languages)
	}
	if c.RestrictedPython() || strings.Join(c.PythonAllowedImports, ",") != strings.Join(pypolicy.DefaultAllowedImports, ",") || c.PythonMaxASTNodes != pypolicy.DefaultMaxASTNodes {
		t.Fatalf("python policy defaults: %q %v %d", c.PythonPolicy, c.PythonAllowedImports, c.PythonMaxASTNodes)
	}
}

func TestBadValuesNameTheVariable(t *testing.T) {
	cases := []struct {
		env  []string
		want []string
	}{
		{[]string{"CODE_EXEC_SANDBOX=dockr"}, []string{"CODE_EXEC_SANDBOX", `"dockr"`, "docker, process, none or kubernetes"}},
		{[]string{"CODE_EXEC_TIMEOUT=ten"}, []string{"CODE_EXEC_TIMEOUT", `"ten"`, "duration"}},
		{[]string{"CODE_EXEC_MEMORY=lots"}, []string{"CODE_EXEC_MEMORY", "byte size"}},
		{[]string{"CODE_EXEC_MEMORY=1m"}, []string{"CODE_EXEC_MEMORY", "32m"}},
		{[]string{"CODE_EXEC_TRANSPORT=carrier-pigeon"}, []string{"CODE_EXEC_TRANSPORT", "stdio, sse or http"}},
		{[]string{"CODE_EXEC_MAX_CONCURRENCY=0"}, []string{"CODE_EXEC_MAX_CONCURRENCY"}},
		{[]string{"CODE_EXEC_MAX_CONCURRENCY=many"}, []string{"CODE_EXEC_MAX_CONCURRENCY", "whole number"}},
		{[]string{"CODE_EXEC_MAX_SESSIONS=-1"}, []string{"CODE_EXEC_MAX_SESSIONS", "0 to 1024"}},
		{[]string{"CODE_EXEC_SESSION_IDLE_TIMEOUT=0s"}, []string{"CODE_EXEC_SESSION_IDLE_TIMEOUT", "1s to 24h"}},
		{[]string{"CODE_EXEC_SESSION_IDLE_TIMEOUT=soon"}, []string{"CODE_EXEC_SESSION_IDLE_TIMEOUT", "duration"}},
		{[]string{"CODE_EXEC_SESSION_MAX_LIFETIME=999h"}, []string{"CODE_EXEC_SESSION_MAX_LIFETIME", "168h"}},
		{[]string{"CODE_EXEC_LANGUAGES=python,cobol"}, []string{"CODE_EXEC_LANGUAGES", "cobol"}},
		{[]string{"CODE_EXEC_TIMEOUT=-1s"}, []string{"CODE_EXEC_TIMEOUT", "positive"}},
		{[]string{"CODE_EXEC_TIMEOUT=2m"}, []string{"CODE_EXEC_TIMEOUT", "CODE_EXEC_MAX_TIMEOUT"}},
		{[]string{"CODE_EXEC_PROCESS_DISABLE=network,selinux"}, []string{"CODE_EXEC_PROCESS_DISABLE", "selinux"}},
		{[]string{"CODE_EXEC_PROCESS_UID_RANGE=some"}, []string{"CODE_EXEC_PROCESS_UID_RANGE", `"some"`, "FIRST-LAST"}},
		{[]string{"CODE_EXEC_PROCESS_STRICT=maybe"}, []string{"CODE_EXEC_PROCESS_STRICT", "true or false"}},
		{[]string{"CODE_EXEC_LOG_LEVEL=loud"}, []string{"CODE_EXEC_LOG_LEVEL", "debug, info, warn or error"}},
		{[]string{"CODE_EXEC_TRANSPORT=http", "CODE_EXEC_ADDR=0.0.0.0:8080"}, []string{"CODE_EXEC_AUTH_TOKEN", "refusing"}},
		{[]string{"CODE_EXEC_TRANSPORT=sse", "CODE_EXEC_ADDR=:8080"}, []string{"CODE_EXEC_AUTH_TOKEN"}},
		{[]string{"CODE_EXEC_AUTH_TOKEN=short"}, []string{"CODE_EXEC_AUTH_TOKEN", "too short"}},
		{[]string{"CODE_EXEC_TRANSPORT=http", "CODE_EXEC_ADDR=nonsense"}, []string{"CODE_EXEC_ADDR"}},
		{[]string{"CODE_EXEC_PYTHON_POLICY=strict"}, []string{"CODE_EXEC_PYTHON_POLICY", "standard or restricted"}},
		{[]string{"CODE_EXEC_PYTHON_ALLOWED_IMPORTS=math,os"}, []string{"CODE_EXEC_PYTHON_ALLOWED_IMPORTS", `"os"`, "standard"}},
		{[]string{"CODE_EXEC_PYTHON_ALLOWED_IMPORTS=os.path"}, []string{"CODE_EXEC_PYTHON_ALLOWED_IMPORTS", "top-level"}},
		{[]string{"CODE_EXEC_PYTHON_MAX_AST_NODES=5"}, []string{"CODE_EXEC_PYTHON_MAX_AST_NODES", "100 to 1000000"}},
		{[]string{"CODE_EXEC_MEMORY=1m", "CODE_EXEC_PIDS=1"}, []string{"CODE_EXEC_MEMORY", "CODE_EXEC_PIDS", "; "}},
		{[]string{"CODE_EXEC_TASK_MAX_TIMEOUT=30s"}, []string{"CODE_EXEC_TASK_MAX_TIMEOUT", "CODE_EXEC_MAX_TIMEOUT"}},
		{[]string{"CODE_EXEC_TASK_MAX_TIMEOUT=soon"}, []string{"CODE_EXEC_TASK_MAX_TIMEOUT", "duration"}},
		{[]string{"CODE_EXEC_TASK_TTL=0s"}, []string{"CODE_EXEC_TASK_TTL"}},
		{[]string{"CODE_EXEC_METRICS_ADDR=0.0.0.0:9090"}, []string{"CODE_EXEC_METRICS_TOKEN", "refusing"}},
		{[]string{"CODE_EXEC_METRICS_ADDR=nonsense"}, []string{"CODE_EXEC_METRICS_ADDR"}},
		{[]string{"CODE_EXEC_METRICS_TOKEN=short"}, []string{"CODE_EXEC_METRICS_TOKEN", "too short"}},
		{[]string{"CODE_EXEC_ALLOWED_ORIGINS=*"}, []string{"CODE_EXEC_ALLOWED_ORIGINS", `"*"`, "wildcard", "scheme://host[:port]"}},
		{[]string{"CODE_EXEC_ALLOWED_ORIGINS=http://localhost:6274,null"}, []string{"CODE_EXEC_ALLOWED_ORIGINS", `"null"`}},
		{[]string{"CODE_EXEC_ALLOWED_ORIGINS=http://localhost:6274/"}, []string{"CODE_EXEC_ALLOWED_ORIGINS", "no path"}},
		{[]string{"CODE_EXEC_ALLOWED_ORIGINS=localhost:6274"}, []string{"CODE_EXEC_ALLOWED_ORIGINS", `"localhost:6274"`, "http or https"}},
		{[]string{"CODE_EXEC_ALLOWED_ORIGINS=https://*.example.com"}, []string{"CODE_EXEC_ALLOWED_ORIGINS", "no wildcards"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.env, " "), func(t *testing.T) {
			_, err := Load(c.env)
			if err == nil {
				t.Fatalf("Load accepted %v", c.env)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
}

func TestMetricsAndTasks(t *testing.T) {
	c, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MetricsAddr != "" || c.TaskMaxTimeout != time.Hour || c.TaskTTL != 10*time.Minute {
		t.Errorf("defaults: metrics %q, task max timeout %v, task TTL %v; want off, 1h, 10m", c.MetricsAddr, c.TaskMaxTimeout, c.TaskTTL)
	}
	for _, env := range [][]string{
		{"CODE_EXEC_METRICS_ADDR=127.0.0.1:9090"},
		{"CODE_EXEC_METRICS_ADDR=[::1]:9090"},
		{"CODE_EXEC_METRICS_ADDR=0.0.0.0:9090", "CODE_EXEC_METRICS_TOKEN=0123456789abcdef"},
	} {
		if _, err := Load(env); err != nil {
			t.Errorf("Load(%v): %v", env, err)
		}
	}
}

func TestGoodValues(t *testing.T) {
	c, err := Load([]string{
		"CODE_EXEC_SANDBOX=docker", "CODE_EXEC_TRANSPORT=streamable-http", "CODE_EXEC_ADDR=0.0.0.0:9000",
		"CODE_EXEC_AUTH_TOKEN=0123456789abcdef0123", "CODE_EXEC_MEMORY=1g", "CODE_EXEC_MAX_OUTPUT=64k",
		"CODE_EXEC_LANGUAGES=py, node", "CODE_EXEC_TIMEOUT=1m30s", "CODE_EXEC_MAX_TIMEOUT=5m",
		"CODE_EXEC_ALLOWED_ORIGINS=http://LocalHost:6274, https://app.example.com:443,,http://localhost:6274",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox != sandbox.ModeDocker || c.Transport != TransportHTTP || c.Memory != 1<<30 || c.MaxOutput != 64<<10 {
		t.Fatalf("parsed %+v", c)
	}
	if strings.Join(c.Languages, ",") != "python,javascript" {
		t.Fatalf("languages = %v", c.Languages)
	}
	if c.Timeout != 90*time.Second {
		t.Fatalf("timeout = %v", c.Timeout)
	}
	if strings.Join(c.AllowedOrigins, ",") != "http://localhost:6274,https://app.example.com" {
		t.Fatalf("allowed origins = %q, want them as browsers write them, once each", c.AllowedOrigins)
	}
}

func TestByteSize(t *testing.T) {
	cases := map[string]int64{"0": 0, "1024": 1024, "64k": 64 << 10, "256m": 256 << 20, "1g": 1 << 30, "2GiB": 2 << 30, "10MB": 10 << 20, "5 m": 5 << 20}
	for in, want := range cases {
		got, err := ParseByteSize(in)
		if err != nil || int64(got) != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "m", "-1m", "1.5m", "1t", "99999999999g"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", bad)
		}
	}
	if s := ByteSize(256 << 20).String(); s != "256m" {
		t.Errorf("String() = %q", s)
	}
}

// TestHelpListsEverySetting: --help lists every setting with its default,
// its help and its accepted values, whole, in lines of at most HelpWidth.
func TestHelpListsEverySetting(t *testing.T) {
	var b bytes.Buffer
	WriteHelp(&b)
	for i, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if len(line) > HelpWidth || strings.TrimSpace(line) == "" || strings.HasSuffix(line, " ") {
			t.Errorf("line %d of the settings' help is %d columns, empty or ends in a space: %q", i+1, len(line), line)
		}
	}
	squeezed := strings.Join(strings.Fields(b.String()), "")
	for _, s := range Settings() {
		if !strings.HasPrefix(s.Name, "CODE_EXEC_") || s.Help == "" || s.Accepted == "" {
			t.Errorf("setting %+v lacks a name, help or accepted values", s)
		}
		for _, part := range []string{s.Name, s.Default, s.Help, s.Accepted} {
			if !strings.Contains(squeezed, strings.Join(strings.Fields(part), "")) {
				t.Errorf("--help does not show %s's %q whole", s.Name, part)
			}
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "127.1.2.3": true, "0.0.0.0": false, "": false, "10.0.0.1": false, "example.com": false} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v", host, got)
		}
	}
}

// The settings table in docs/configuration.md must list every variable with its default.
func TestSettingsTableListsEverySetting(t *testing.T) {
	const doc = "../docs/configuration.md"
	page, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Settings() {
		def := "(empty)"
		if s.Default != "" {
			def = "`" + s.Default + "`"
		}
		row := fmt.Sprintf("| `%s` | %s |", s.Name, def)
		if !strings.Contains(string(page), row) {
			t.Errorf("%s lacks the row %q", doc, row)
		}
	}
}

// TestElicitationCounts: an MCP client's answer counts where a person
// stands behind it (stdio, HTTP without a token), not behind a token unless
// the operator opts in, and never with false.
func TestElicitationCounts(t *testing.T) {
	token := "CODE_EXEC_AUTH_TOKEN=0123456789abcdef0123"
	cases := []struct {
		env  []string
		want bool
	}{
		{nil, true},
		{[]string{"CODE_EXEC_TRANSPORT=http"}, true},
		{[]string{"CODE_EXEC_TRANSPORT=http", token}, false},
		{[]string{"CODE_EXEC_TRANSPORT=sse", "CODE_EXEC_ADDR=0.0.0.0:8080", token}, false},
		{[]string{"CODE_EXEC_TRANSPORT=http", token, "CODE_EXEC_APPROVAL_ELICIT=true"}, true},
		{[]string{"CODE_EXEC_TRANSPORT=http", token, "CODE_EXEC_APPROVAL_ELICIT=1"}, true},
		{[]string{"CODE_EXEC_APPROVAL_ELICIT=false"}, false},
		{[]string{"CODE_EXEC_TRANSPORT=http", "CODE_EXEC_APPROVAL_ELICIT=FALSE"}, false},
		{[]string{"CODE_EXEC_APPROVAL_ELICIT=auto", token}, true}, // stdio: the token does not apply
	}
	for _, c := range cases {
		cfg, err := Load(c.env)
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		got, why := cfg.ElicitationCounts()
		if got != c.want || why == "" {
			t.Errorf("%v: ElicitationCounts() = %v, %q; want %v", c.env, got, why, c.want)
		}
	}
	if _, err := Load([]string{"CODE_EXEC_APPROVAL_ELICIT=sometimes"}); err == nil || !strings.Contains(err.Error(), "CODE_EXEC_APPROVAL_ELICIT") || !strings.Contains(err.Error(), "auto, true or false") {
		t.Errorf("a bad CODE_EXEC_APPROVAL_ELICIT: %v", err)
	}
}

func TestNetworkSettings(t *testing.T) {
	t.Parallel()
	base := []string{"CODE_EXEC_SANDBOX=process"}
	c, err := Load(base)
	if err != nil {
		t.Fatal(err)
	}
	if c.Network != NetworkNone {
		t.Fatalf("default network = %q, want none", c.Network)
	}
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"CODE_EXEC_NETWORK=open"}, "CODE_EXEC_NETWORK="},
		{[]string{"CODE_EXEC_NETWORK=allowlist"}, "needs CODE_EXEC_NETWORK_ALLOW"},
		{[]string{"CODE_EXEC_NETWORK=allowlist", "CODE_EXEC_NETWORK_ALLOW=ok.example,bad host"}, `"bad host"`},
		{[]string{"CODE_EXEC_NETWORK=allowlist", "CODE_EXEC_NETWORK_ALLOW=a.example", "CODE_EXEC_NETWORK_RESOLVE=a.example=nope"}, `"a.example=nope"`},
		{[]string{"CODE_EXEC_NETWORK=allowlist", "CODE_EXEC_NETWORK_ALLOW=a.example", "CODE_EXEC_NETWORK_MAX_CONNECTIONS=0"}, "CODE_EXEC_NETWORK_MAX_CONNECTIONS"},
		{[]string{"CODE_EXEC_NETWORK_ALLOW=a.example"}, "CODE_EXEC_NETWORK_ALLOW is set but CODE_EXEC_NETWORK=none"},
		{[]string{"CODE_EXEC_NETWORK_ALLOW_PRIVATE=true"}, "CODE_EXEC_NETWORK_ALLOW_PRIVATE is set"},
	} {
		_, err := Load(append(append([]string{}, base...), tt.env...))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Load(%q) error = %v, want it to contain %q", tt.env, err, tt.want)
		}
	}
}
