package configs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
)

// The misspelled names below are written as Prefix + "..." so that
// TestEveryNameInTheRepositoryIsKnown does not take them for names that
// the project uses.

// TestUnknownSettingsStopTheServer: a name of codeexec's namespace that is
// no setting (a misspelling, a guess, a near miss of the prefix) is a
// configuration error that names it and the closest settings, in one line,
// without its value; the settings it looks like are not taken for it.
func TestUnknownSettingsStopTheServer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  string
		want []string
	}{
		{Prefix + "SANDBOX_MODE=docker", []string{Prefix + "SANDBOX_MODE is not a codeexec setting", "did you mean CODE_EXEC_SANDBOX?"}},
		{Prefix + "TIMOUT=30s", []string{Prefix + "TIMOUT", "did you mean CODE_EXEC_TIMEOUT?"}},
		{Prefix + "MAX_TIMOUT=30s", []string{"did you mean CODE_EXEC_MAX_TIMEOUT?"}},
		{"CODEEXEC_SANDBOX=docker", []string{"CODEEXEC_SANDBOX is not a codeexec setting", "did you mean CODE_EXEC_SANDBOX?"}},
		{"code_exec_sandbox=docker", []string{"code_exec_sandbox", "did you mean CODE_EXEC_SANDBOX?"}},
		{"CODE-EXEC-SANDBOX=docker", []string{"did you mean CODE_EXEC_SANDBOX?"}},
		{"CODE_EXECSANDBOX=docker", []string{"CODE_EXECSANDBOX", "did you mean CODE_EXEC_SANDBOX?"}},
		{"CODEEXEC_NETWORK_ALLOWLIST=a.example", []string{"did you mean CODE_EXEC_NETWORK_ALLOW?"}},
		{Prefix + "sandbox=docker", []string{"did you mean CODE_EXEC_SANDBOX?"}},
		{Prefix + "IMAGE=codeexec-sandbox:datascience", []string{"did you mean CODE_EXEC_DOCKER_IMAGE or CODE_EXEC_K8S_IMAGE?"}},
		{Prefix + "MEM=1g", []string{"did you mean CODE_EXEC_MEMORY?"}},
		{Prefix + "NET=allowlist", []string{"did you mean CODE_EXEC_NETWORK?"}},
		{Prefix + "SANDBX_TYPE=docker", []string{"did you mean CODE_EXEC_SANDBOX?"}},
		{Prefix + "TIMEOUT_SECONDS=30", []string{"did you mean CODE_EXEC_TIMEOUT?"}},
		{Prefix + "APPROVALS=always", []string{"did you mean CODE_EXEC_APPROVAL?"}},
		{Prefix + "ZZZ=1", []string{Prefix + "ZZZ is not a codeexec setting: remove it"}},
		{"CODEEXEC_=1", []string{"CODEEXEC_ is not a codeexec setting"}},
		{Prefix + "AUTH_TOKN=hunter2-hunter2-hunter2", []string{"did you mean CODE_EXEC_AUTH_TOKEN?"}},
	}
	for _, c := range cases {
		t.Run(c.env, func(t *testing.T) {
			t.Parallel()
			_, err := Load([]string{c.env})
			if err == nil {
				t.Fatalf("Load accepted %s", c.env)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			if _, value, _ := strings.Cut(c.env, "="); strings.Contains(msg, value) {
				t.Errorf("error %q shows the value %q", msg, value)
			}
		})
	}
}

// TestUnknownSettingsAndBadValuesTogether: one line names every unknown
// name and every bad value.
func TestUnknownSettingsAndBadValuesTogether(t *testing.T) {
	t.Parallel()
	_, err := Load([]string{Prefix + "TIMOUT=30s", "CODEEXEC_SANDBOX=docker", "CODE_EXEC_MEMORY=lots"})
	if err == nil {
		t.Fatal("Load accepted them")
	}
	for _, w := range []string{Prefix + "TIMOUT", "CODEEXEC_SANDBOX", "CODE_EXEC_MEMORY=\"lots\" is not valid"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
}

// TestNamesThatAreNoSettingsButKnown: the names kept for tests and CI, the
// ignored names and names of other programs do not stop the server.
func TestNamesThatAreNoSettingsButKnown(t *testing.T) {
	t.Parallel()
	env := []string{"PATH=/usr/bin", "CODEX_HOME=/tmp", "CODE_EXECUTOR_HOME=/opt/x", "MY_CODE_EXEC_SANDBOX=1"}
	for _, p := range ReservedPrefixes {
		env = append(env, p+"ANYTHING=1")
	}
	for _, n := range IgnoredNames {
		env = append(env, n+"=1")
	}
	if _, err := Load(env); err != nil {
		t.Fatalf("Load(%q): %v", env, err)
	}
	for _, s := range Settings() {
		for _, p := range ReservedPrefixes {
			if strings.HasPrefix(s.Name, p) {
				t.Errorf("the setting %s is under the prefix %s, kept for tests", s.Name, p)
			}
		}
		if slices.Contains(IgnoredNames, s.Name) {
			t.Errorf("the setting %s is listed as ignored", s.Name)
		}
	}
}

// TestEveryNameInTheRepositoryIsKnown: every CODE_EXEC_* name that the
// project's code, scripts and manifests use is a setting, under a reserved
// prefix or ignored, so that no test's or script's variable stops a server
// started with it; and every ignored name is still used somewhere.
func TestEveryNameInTheRepositoryIsKnown(t *testing.T) {
	t.Parallel()
	names := regexp.MustCompile(`(CODE_EXEC_|CODEEXEC_)[A-Z0-9_]*`)
	self, _ := filepath.Abs("names.go")
	used := map[string][]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if abs, _ := filepath.Abs(path); abs == self ||
			!slices.Contains([]string{".go", ".sh", ".yaml", ".yml", ".toml", ".py", ".txtar"}, ext) && d.Name() != "run" && d.Name() != "Dockerfile" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range names.FindAllString(string(b), -1) {
			if !strings.HasSuffix(n, "_") { // a prefix, as in CODE_EXEC_K8S_*
				used[n] = append(used[n], path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for n, where := range used {
		if strings.HasPrefix(n, Prefix) && !known(n) {
			t.Errorf("%s (in %s) is no setting, not under %v and not in IgnoredNames: a server started with it would refuse to start; add it to IgnoredNames or rename it under a reserved prefix", n, where[0], ReservedPrefixes)
		}
	}
	for _, n := range IgnoredNames {
		if len(used[n]) == 0 {
			t.Errorf("IgnoredNames lists %s, which nothing uses any more: remove it", n)
		}
	}
}

// TestEnumeratedValuesIgnoreCase: the values of enumerated settings are
// matched in any case, and a bad one still lists the accepted values.
func TestEnumeratedValuesIgnoreCase(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{
		"CODE_EXEC_SANDBOX=Docker", "CODE_EXEC_TRANSPORT=HTTP", "CODE_EXEC_NETWORK=None", "CODE_EXEC_APPROVAL=Risky",
		"CODE_EXEC_APPROVAL_ELICIT=False", "CODE_EXEC_WORKSPACE_MODE=RO", "CODE_EXEC_PYTHON_POLICY=Restricted",
		"CODE_EXEC_K8S_NETWORK_CHECK=Warn", "CODE_EXEC_LOG_LEVEL=DEBUG", "CODE_EXEC_LOG_FORMAT=JSON",
		"CODE_EXEC_PROCESS_STRICT=TRUE", "CODE_EXEC_PACKAGES=False", "CODE_EXEC_LANGUAGES=Python,BASH",
	})
	if err != nil {
		t.Fatal(err)
	}
	got := []string{string(c.Sandbox), string(c.Transport), string(c.Network), string(c.Approval), string(c.ApprovalElicit),
		c.WorkspaceMode, c.PythonPolicy, c.K8sNetworkCheck, c.LogLevel, c.LogFormat, strings.Join(c.Languages, ",")}
	want := []string{string(sandbox.ModeDocker), string(TransportHTTP), string(NetworkNone), string(approvals.PolicyRisky), string(ElicitFalse),
		"ro", "restricted", "warn", "debug", "json", "python,bash"}
	if !slices.Equal(got, want) || !c.ProcessStrict || c.Packages {
		t.Errorf("parsed %q (strict %v, packages %v), want %q", got, c.ProcessStrict, c.Packages, want)
	}
	for _, bad := range []struct{ env, accepted string }{
		{"CODE_EXEC_SANDBOX=Dockr", "docker, process, none or kubernetes"},
		{"CODE_EXEC_WORKSPACE_MODE=Write", "ro or rw"},
		{"CODE_EXEC_LOG_FORMAT=XML", "text or json"},
	} {
		if _, err := Load([]string{bad.env}); err == nil || !strings.Contains(err.Error(), bad.accepted) {
			t.Errorf("Load(%s) = %v, want an error listing %q", bad.env, err, bad.accepted)
		}
	}
}

// TestNamesThatAreNoSettingsAreDocumented: docs/configuration.md names
// every reserved prefix and every ignored name.
func TestNamesThatAreNoSettingsAreDocumented(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(slices.Clone(ReservedPrefixes), IgnoredNames...) {
		if !strings.Contains(string(page), "`"+n+"`") {
			t.Errorf("docs/configuration.md does not name `%s`, which the server leaves alone", n)
		}
	}
}
