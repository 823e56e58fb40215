package host_test

import (
	"context"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

func newRunner(t *testing.T) *host.Runner {
	t.Helper()
	r, err := host.New(context.Background(), host.Config{Languages: sandbox.LanguageNames(), WorkRoot: t.TempDir()})
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

func TestSuite(t *testing.T) {
	sandboxtest.RunSuite(t, newRunner(t), sandboxtest.Options{Mode: sandbox.ModeNone})
}

// Mode none promises the opposite of scrubbing: the server's environment.
func TestSeesServerEnvironment(t *testing.T) {
	t.Setenv("CODE_EXEC_TEST_VISIBLE", "visible-in-mode-none")
	r := newRunner(t)
	res, err := r.Run(context.Background(), sandboxtest.Req("bash", `echo "$CODE_EXEC_TEST_VISIBLE"`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "visible-in-mode-none\n" {
		t.Fatalf("stdout = %q", res.Stdout)
	}
}

func TestCapabilitiesWarn(t *testing.T) {
	caps := newRunner(t).Capabilities()
	if len(caps.Warnings) == 0 || !strings.Contains(caps.Warnings[0], "UNSANDBOXED") {
		t.Fatalf("mode none must warn loudly, got %q", caps.Warnings)
	}
	for _, p := range caps.Protections {
		if p.Active && (p.Name == "scrubbed environment" || p.Name == "network isolation") {
			t.Fatalf("mode none claims %q", p.Name)
		}
	}
	if caps.Isolation != (sandbox.Isolation{}) {
		t.Fatalf("mode none declares isolation: %+v", caps.Isolation)
	}
}
