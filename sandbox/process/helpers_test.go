package process_test

import (
	"context"
	"os"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// newRunnerWith makes a runner with some isolation features turned off.
func newRunnerWith(t *testing.T, disable ...process.Feature) *process.Runner {
	t.Helper()
	return newRunnerIn(t, WorkRoot(t), disable...)
}

func newRunnerIn(t *testing.T, workRoot string, disable ...process.Feature) *process.Runner {
	t.Helper()
	r, err := process.New(context.Background(), process.Config{Languages: sandbox.LanguageNames(), WorkRoot: workRoot, Disable: disable})
	if err != nil {
		t.Fatalf("process.New: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// requireActive skips (or, with CODE_EXEC_REQUIRE_ISOLATION=1, fails) when
// this host cannot give the feature.
func requireActive(t *testing.T, r *process.Runner, name string) {
	t.Helper()
	for _, p := range r.Capabilities().Protections {
		if p.Name == name {
			if p.Active {
				return
			}
			if os.Getenv("CODE_EXEC_REQUIRE_ISOLATION") == "1" {
				t.Fatalf("%s is unavailable on this host: %s", name, p.Detail)
			}
			t.Skipf("%s is unavailable on this host: %s", name, p.Detail)
		}
	}
	t.Fatalf("sandbox_info does not list %q", name)
}

func protection(r *process.Runner, name string) sandbox.Protection {
	for _, p := range r.Capabilities().Protections {
		if p.Name == name {
			return p
		}
	}
	return sandbox.Protection{}
}

func runCode(t *testing.T, r *process.Runner, lang, code string) *sandbox.Result {
	t.Helper()
	res, err := r.Run(context.Background(), sandboxtest.Req(lang, code))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// newLoadedRunner is a runner as the server makes it: one run prepared
// ahead per language, python's and javascript's interpreters started in
// theirs, for the suite's limits; with, set, more of its Config.
func newLoadedRunner(t *testing.T, with ...func(*process.Config)) *process.Runner {
	t.Helper()
	cfg := process.Config{Languages: sandbox.LanguageNames(), WorkRoot: WorkRoot(t), PoolSize: 1, PoolLimits: sandboxtest.DefaultLimits()}
	for _, f := range with {
		f(&cfg)
	}
	r, err := process.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("process.New: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if !r.Capabilities().Active("runs kept apart") {
		// Interpreters start ahead only where runs are kept apart.
		if os.Getenv("CODE_EXEC_REQUIRE_ISOLATION") == "1" && os.Geteuid() == 0 {
			t.Fatal("runs are not kept apart here, so no interpreter starts ahead")
		}
		t.Skip("runs are not kept apart on this host (no uid range, or no PID and user namespaces), so no interpreter starts ahead of its run")
	}
	return r
}

// waitLoaded waits until a run of lang waits in r's pool with its
// interpreter started and loaded, and returns its supervisor's pid.
func waitLoaded(t *testing.T, r *process.Runner, lang string) int {
	t.Helper()
	pid, err := process.WaitLoaded(t.Context(), r, lang)
	if err != nil {
		t.Fatalf("no %s interpreter was started ahead: %v", lang, err)
	}
	return pid
}
