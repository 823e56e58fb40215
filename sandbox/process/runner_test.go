package process_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	process.MaybeRunHelper()
	os.Exit(m.Run())
}

func newRunner(t *testing.T) *process.Runner {
	t.Helper()
	r, err := process.New(context.Background(), process.Config{Languages: sandbox.LanguageNames(), WorkRoot: WorkRoot(t)})
	if err != nil {
		t.Fatalf("process.New: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

func TestSuite(t *testing.T) {
	sandboxtest.RunSuite(t, newRunner(t), sandboxtest.Options{Mode: sandbox.ModeProcess, ScrubsEnv: true})
}

// WorkRoot returns a temporary directory that the sandbox user can search
// (t.TempDir makes private ones), and checks at the end that every run
// directory in it was removed.
func WorkRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		left, _ := filepath.Glob(filepath.Join(dir, "codeexec-*", "run-*"))
		if len(left) > 0 {
			t.Errorf("run directories left behind: %v", left)
		}
	})
	return dir
}

func TestSessionSuite(t *testing.T) {
	r := newRunner(t)
	opts := sandboxtest.SessionOptions{
		Mode: sandbox.ModeProcess, ScrubsEnv: true,
		Gone: func(t *testing.T, dir string) bool { _, err := os.Stat(dir); return os.IsNotExist(err) },
	}
	// A session's directory is capped as a run's is: where the work
	// directory cap (the mount namespace) is active.
	if !r.Capabilities().Active("work directory cap") {
		if os.Getenv("CODE_EXEC_REQUIRE_ISOLATION") == "1" && os.Geteuid() == 0 {
			t.Fatal("the work directory cap is not active")
		}
		opts.DirUncapped = "the work directory cap is not active on this host (no mount namespace): a session's directory is the host's, capped per file"
	}
	// Runs that share the server's host user without a user namespace have
	// a process limit (RLIMIT_NPROC) over every process of that user: the
	// suite's own sessions and the test binaries beside it take from each
	// session's headroom as they start (TestInterpreterAtTheProcessLimit in
	// sandbox/sessions is what happens when none is left).
	if !r.Capabilities().Active("runs kept apart") {
		opts.Processes = 4096
	}
	sandboxtest.RunSessionSuite(t, r.Sessions(), opts)
}
