package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTaskCapsAndFairness drives the real binary in process mode with two
// run slots: client A's tasks wait on a program that waits for a file the
// test makes; A may have CODE_EXEC_MAX_TASKS_PER_CLIENT of them, and the
// next is refused naming the setting; client B (the MCP Go SDK client)
// makes a plain call, which runs and completes while A's tasks still wait;
// then the test releases them and they complete.
func TestTaskCapsAndFairness(t *testing.T) {
	t.Parallel()
	signal := t.TempDir()
	s := startHTTP(t, http_, serverEnv(t, map[string]string{
		"CODE_EXEC_SANDBOX":              "process",
		"CODE_EXEC_MAX_CONCURRENCY":      "2",
		"CODE_EXEC_MAX_TASKS_PER_CLIENT": "3",
		"CODE_EXEC_WORKSPACE":            signal,
	}))
	a := newLegacyTaskClient(t, s)
	m := marker()
	wait := fmt.Sprintf(`{"language":"bash","code":"sleep %s & while [ ! -e \"$WORKSPACE/go\" ]; do sleep 0.05; done; kill %%1; echo released","timeout_seconds":300}`, m)
	var ids []string
	for range 3 {
		ids = append(ids, a.start(wait))
	}
	// The fourth is refused: on 2025-11-25 the task's result says why.
	over := a.start(`{"language":"python","code":"print(1)"}`)
	res, rerr, _ := a.post("tasks/result", fmt.Sprintf(`{"taskId":%q}`, over))
	if rerr != nil || res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "CODE_EXEC_MAX_TASKS_PER_CLIENT") {
		t.Fatalf("a fourth task of one client = %v %v, want an isError result naming CODE_EXEC_MAX_TASKS_PER_CLIENT", res, rerr)
	}
	waitAlive(t, m)

	// B's plain call runs while A's tasks wait.
	b := dial(t, s, connectOpts{})
	_, out := execute(t, b, map[string]any{"language": "python", "code": "print(6*7)"})
	if out.Stdout != "42\n" {
		t.Fatalf("B's plain call: %+v, want 42", out)
	}
	for _, id := range ids {
		if st := a.get(id)["status"]; st != "working" {
			t.Fatalf("A's task %s is %v after B's call, want it still waiting for the test's signal", id, st)
		}
	}

	if err := os.WriteFile(filepath.Join(signal, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		task := a.poll(id, 50*time.Millisecond, 2*time.Minute)
		if _, out := a.result(id, task); out.Stdout != "released\n" {
			t.Errorf("A's task %s: %+v, want it released", id, out)
		}
	}
	waitGone(t, m)
}
