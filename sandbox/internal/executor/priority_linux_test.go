//go:build linux

package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// A prepared run waits, and its interpreter loads, at the lowest CPU
// priority where the server may raise it again, and its program runs at the
// server's: every thread of the supervisor and of the interpreter is at
// nice 19 until the hand-over, and the program reads its own nice value.
func TestPreparedRunsWaitAtLowPriority(t *testing.T) {
	low, server := executor.PreparesAtLowPriority()
	if os.Geteuid() == 0 && !low {
		// As root on a host with a /proc that lists children (CI's), the
		// server may raise priorities: the feature must be on there.
		t.Fatalf("the server runs as root, but prepared runs do not wait at a low priority")
	}
	spec := preloadSpec(t, `printf '\026' >&3; m=$(cat <&3); exec 3<&-; read -r stat </proc/self/stat; set -- ${stat##*) }; shift 16; echo "nice=$1"`)
	p, err := executor.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wait(t, p.Loaded(), "the interpreter's loading")
	want := server
	if low {
		want = 19
	}
	threads := treeNice(t, p.PID())
	if len(threads) < 2 {
		t.Fatalf("found %d threads under the supervisor, want its own and the interpreter's", len(threads))
	}
	for tid, n := range threads {
		if n != want {
			t.Errorf("thread %d waits at nice %d, want %d (low priority: %v)", tid, n, want, low)
		}
	}
	spec.Preload = &executor.Preload{Message: []byte("go")}
	res := &sandbox.Result{}
	if err := executor.SpawnPrepared(context.Background(), p, spec, res); err != nil {
		t.Fatal(err)
	}
	if w := "nice=" + strconv.Itoa(server) + "\n"; res.ExitCode != 0 || res.Stdout != w {
		t.Fatalf("exit %d, stdout %q, stderr %q; want stdout %q (the server's priority)", res.ExitCode, res.Stdout, res.Stderr, w)
	}
}

// treeNice returns the nice value of every thread of pid and of its
// descendants, by thread id.
func treeNice(t *testing.T, pid int) map[int]int {
	t.Helper()
	out := map[int]int{}
	todo := []int{pid}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		tasks, err := filepath.Glob("/proc/" + strconv.Itoa(p) + "/task/*")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			b, err := os.ReadFile(task + "/stat")
			if err != nil {
				continue
			}
			// Fields after the command's closing parenthesis: state is
			// the first, nice the 17th.
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
			n, err := strconv.Atoi(f[16])
			if err != nil {
				t.Fatal(err)
			}
			tid, _ := strconv.Atoi(filepath.Base(task))
			out[tid] = n
			c, _ := os.ReadFile(task + "/children")
			for _, s := range strings.Fields(string(c)) {
				child, _ := strconv.Atoi(s)
				todo = append(todo, child)
			}
		}
	}
	return out
}

// A thread being created while the hand-over's walk lists the threads keeps
// the low priority; under load that is common while an interpreter started
// ahead loads (its threads, or the exec stage being forked), and a program
// at nice 19 on a busy host crawls. A run handed over while its interpreter
// loads is walked again once it has loaded, when nothing of it creates
// threads, before its program gets the request: even when every walk before
// that misses every thread, the program runs at the server's priority.
func TestRunHandedOverWhileLoadingRegainsPriority(t *testing.T) {
	low, server := executor.PreparesAtLowPriority()
	skipped := executor.SkipEarlyRestores(t)
	spec, p, gate := prepareGated(t, `read -r stat </proc/self/stat; set -- ${stat##*) }; shift 16; echo "nice=$1"`)
	res := &sandbox.Result{}
	done := make(chan error, 1)
	go func() { done <- executor.SpawnPrepared(context.Background(), p, spec, res) }()
	if low {
		// The hand-over found the interpreter loading (it waits for the
		// gate) and skipped the walk.
		wait(t, skipped, "the hand-over of a run whose interpreter is loading")
	}
	// Let it load: opening the gate for writing ends its wait.
	f, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("load\n")
	f.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w := "nice=" + strconv.Itoa(server) + "\n"; res.ExitCode != 0 || res.Stdout != w {
		t.Fatalf("exit %d, stdout %q, stderr %q; want stdout %q (the server's priority)", res.ExitCode, res.Stdout, res.Stderr, w)
	}
}

// A supervisor alone, prepared ahead, is not lowered: nothing of it tells
// the server when it has stopped creating threads (see the test above).
func TestSupervisorAloneKeepsPriority(t *testing.T) {
	_, server := executor.PreparesAtLowPriority()
	spec := preloadSpec(t, `echo never`)
	spec.Preload = nil
	p, err := executor.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for tid, n := range treeNice(t, p.PID()) {
		if n != server {
			t.Errorf("thread %d of a supervisor alone waits at nice %d, want the server's %d", tid, n, server)
		}
	}
}
