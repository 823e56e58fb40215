package executor_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

func TestWorkRootsOfDeadServersAreRemoved(t *testing.T) {
	base := t.TempDir()
	live, err := executor.NewWorkRoot(base, "codeexec-", 0o711, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	// A server that died left its work root and a run directory behind:
	// its lock file exists, but nobody holds it.
	dead := filepath.Join(base, "codeexec-dead")
	if err := os.MkdirAll(filepath.Join(dead, "run-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, ".codeexec.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Something that is not a work root of ours.
	foreign := filepath.Join(base, "codeexec-foreign")
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}

	next, err := executor.NewWorkRoot(base, "codeexec-", 0o711, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Remove()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead server's work root is still there: %v", err)
	}
	if _, err := os.Stat(live.Dir); err != nil {
		t.Errorf("a live server's work root was removed: %v", err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a directory without a lock file was removed: %v", err)
	}
	if err := next.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := next.Remove(); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := os.Stat(next.Dir); !os.IsNotExist(err) {
		t.Fatalf("Remove left %s", next.Dir)
	}
}
