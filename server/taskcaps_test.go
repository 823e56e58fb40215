package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/server/tasks"
)

// legacySession opens a 2025-11-25 client session that may make tasks.
func (ts *taskServer) legacySession() string {
	ts.t.Helper()
	_, _, h := ts.rpc("2025-11-25", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"raw","version":"1"}}}`)
	session := h.Get("Mcp-Session-Id")
	if session == "" {
		ts.t.Fatal("initialize: no session")
	}
	ts.rpc("2025-11-25", session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return session
}

// legacyTask calls code_execute as a task in session with arguments args
// (JSON) and returns the task's id, or the isError result's text when the
// call was refused at once.
func (ts *taskServer) legacyTask(session, args string) (id, refused string) {
	ts.t.Helper()
	res, rerr, _ := ts.rpc("2025-11-25", session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"code_execute","arguments":`+args+`,"task":{}}}`)
	if rerr != nil {
		ts.t.Fatalf("tools/call as a task: %v", rerr)
	}
	task, _ := res["task"].(map[string]any)
	id, _ = task["taskId"].(string)
	if id == "" {
		ts.t.Fatalf("tools/call as a task answered %v, want a task", res)
	}
	return id, ""
}

// legacyResult waits for the task's result (tasks/result).
func (ts *taskServer) legacyResult(session, id string) map[string]any {
	ts.t.Helper()
	res, rerr, _ := ts.rpc("2025-11-25", session, fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":%q}}`, id))
	if rerr != nil {
		ts.t.Fatalf("tasks/result: %v", rerr)
	}
	return res
}

// post sends a 2026-07-28 request without the tasks extension (a plain
// call) with ctx, and returns its result.
func (ts *taskServer) post(ctx context.Context, method, params string) (map[string]any, error) {
	params = strings.TrimSuffix(params, "}") + ","
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":%q,"params":%s"_meta":%s}}`, method, params, modernMeta(false))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", "code_execute")
	resp, err := testClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var msg struct {
		Result map[string]any `json:"result"`
		Error  map[string]any `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		return nil, err
	}
	if msg.Error != nil {
		return nil, fmt.Errorf("%v", msg.Error)
	}
	return msg.Result, nil
}

// gatedRunner is a fake sandbox whose runs wait until the test releases
// them: arrived counts the runs that reached the runner chain (before the
// concurrency limit), started those that got a run slot.
type gatedRunner struct {
	arrived, started atomic.Int32
	release          chan struct{}
	limited          *sandbox.Limited

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when a count changes
}

// bump tells the waiters of await that a count changed.
func (g *gatedRunner) bump() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.changed)
	g.changed = make(chan struct{})
}

// await waits until cond (on the counts) holds, woken by each change; the
// minute only bounds a hang.
func (g *gatedRunner) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		g.mu.Lock()
		changed := g.changed
		g.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("still waiting for %s after a minute", what)
		}
	}
}

func newGatedRunner(t *testing.T, slots int) *gatedRunner {
	g := &gatedRunner{release: make(chan struct{}), changed: make(chan struct{})}
	fake := &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Languages: []sandbox.LanguageStatus{{Name: "python", Available: true}}},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			g.started.Add(1)
			g.bump()
			if req.Code == "wait" {
				select {
				case <-g.release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &sandbox.Result{Stdout: "ran " + req.Code + "\n", Sandbox: sandbox.ModeProcess}, nil
		},
	}
	g.limited = sandbox.Limit(fake, slots)
	t.Cleanup(func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	})
	return g
}

func (g *gatedRunner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	g.arrived.Add(1)
	g.bump()
	return g.limited.Run(ctx, req)
}
func (g *gatedRunner) Capabilities() sandbox.Capabilities { return g.limited.Capabilities() }
func (g *gatedRunner) Close() error                       { return nil }

// waitFor polls cond until it holds, as a client polls tasks/get for a
// task's status; the minute only bounds a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after a minute", what)
		}
	}
}

// TestPlainCallRunsWhileAnotherClientsTasksWait: client A's tasks, all
// waiting on a program that waits for the test's signal, hold at most all
// but one of the run slots, so that client B's plain call runs and
// completes while they wait; A's tasks run once released.
func TestPlainCallRunsWhileAnotherClientsTasksWait(t *testing.T) {
	t.Parallel()
	g := newGatedRunner(t, 2)
	ts := newTaskServerWith(t, g, tasks.Config{}, func(o *Options) { o.MaxConcurrency = 2 })
	a := ts.legacySession()
	var ids []string
	for range 5 {
		id, _ := ts.legacyTask(a, `{"language":"python","code":"wait"}`)
		ids = append(ids, id)
	}
	g.await(t, "A's five tasks to reach the run slots, and one to run", func() bool { return g.arrived.Load() == 5 && g.started.Load() >= 1 })

	// B's plain call: it must complete while A's tasks wait (before the
	// test releases them); a deadline only turns a hang into a failure.
	done := make(chan map[string]any, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := ts.post(ctx, "tools/call", `{"name":"code_execute","arguments":{"language":"python","code":"b"}}`)
		if err != nil {
			res = map[string]any{"error": err.Error()}
		}
		done <- res
	}()
	res := <-done
	sc, _ := res["structuredContent"].(map[string]any)
	if sc["stdout"] != "ran b\n" {
		t.Fatalf("B's plain call = %v while A's tasks waited, want it run (A's tasks had started %d runs)", res, g.started.Load()-1)
	}
	if n := g.started.Load(); n != 2 {
		t.Errorf("%d runs started when B's call completed, want A's one and B's: A's tasks took more than their share of the slots", n)
	}
	for _, id := range ids {
		if got, _ := ts.store.Get(ownerOfSession(a), id); got.Status.Terminal() {
			t.Errorf("A's task %s ended (%s) before the test released it", id, got.Status)
		}
	}
	close(g.release)
	for _, id := range ids {
		if out := ts.legacyResult(a, id); !strings.Contains(fmt.Sprint(out), "ran wait") {
			t.Errorf("A's task %s: %v, want it run once released", id, out)
		}
	}
}

// liveHeap returns the bytes the heap holds after a collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestQueuedTaskMemory measures what a queued task holds in memory: tasks
// whose files argument brings a 7 MiB file, queued behind a task that
// holds the only run slot, over both task protocols. It logs the bytes per
// queued task (go test ./server/ -run TestQueuedTaskMemory -v) and fails
// when one holds more than its file once and a quarter: a task keeps its
// arguments decoded, once, not also their JSON text and its parsed copy.
// It does not run in parallel, so that the heap is the test's alone.
func TestQueuedTaskMemory(t *testing.T) {
	const size, queued = 7 << 20, 6
	content := base64.StdEncoding.EncodeToString(make([]byte, size))
	args := fmt.Sprintf(`{"language":"python","code":"queued","files":[{"path":"big.bin","content":%q,"encoding":"base64"}]}`, content)
	for _, protocol := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(protocol, func(t *testing.T) {
			g := newGatedRunner(t, 1)
			ts := newTaskServerWith(t, g, tasks.Config{}, func(o *Options) {
				o.MaxConcurrency = 1
				o.Files = artifacts.InputLimits{MaxFiles: 1, MaxTotalBytes: 8 << 20}
			})
			session := ""
			create := func(args string) string {
				if protocol == "2025-11-25" {
					id, _ := ts.legacyTask(session, args)
					return id
				}
				res, rerr := ts.modern("tools/call", `{"name":"code_execute","arguments":`+args+`}`, true)
				id, _ := res["taskId"].(string)
				if rerr != nil || id == "" {
					t.Fatalf("tools/call: %v %v, want a task", res, rerr)
				}
				return id
			}
			if protocol == "2025-11-25" {
				session = ts.legacySession()
			}
			holder := create(`{"language":"python","code":"wait"}`)
			g.await(t, "the first task to hold the slot", func() bool { return g.started.Load() == 1 })
			before := liveHeap()
			var ids []string
			for range queued {
				ids = append(ids, create(args))
			}
			g.await(t, "the tasks to queue for the slot", func() bool { return g.arrived.Load() == queued+1 })
			per := (liveHeap() - before) / queued
			t.Logf("%s: each queued task with a %d MiB file holds %.1f MiB (%.2f times the file)", protocol, size>>20, float64(per)/(1<<20), float64(per)/size)
			if per > size*5/4 {
				t.Errorf("a queued task holds %.1f MiB, more than its %d MiB file once and a quarter", float64(per)/(1<<20), size>>20)
			}
			close(g.release)
			for _, id := range append(ids, holder) {
				if protocol == "2025-11-25" {
					ts.legacyResult(session, id)
				} else {
					ts.pollModern(id, "completed", "failed", "cancelled")
				}
			}
			if n := g.started.Load(); n != queued+1 {
				t.Errorf("%d runs, want %d", n, queued+1)
			}
		})
	}
}

// TestTaskCapsPerClient: a client's tasks that have not ended, and the
// bytes of code, stdin and files they hold, are capped per client; the
// refusal names the setting, and another client still gets its tasks.
func TestTaskCapsPerClient(t *testing.T) {
	t.Parallel()
	g := newGatedRunner(t, 4)
	ts := newTaskServerWith(t, g, tasks.Config{MaxClientTasks: 2, MaxClientBytes: 600, MaxBytes: 1000}, func(o *Options) {
		o.Files = artifacts.InputLimits{MaxFiles: 1, MaxTotalBytes: 1 << 10}
	})
	a, b := ts.legacySession(), ts.legacySession()
	text := func(res map[string]any) string {
		content, _ := res["content"].([]any)
		first, _ := content[0].(map[string]any)
		s, _ := first["text"].(string)
		return s
	}
	refusedWith := func(session, args, want string) {
		t.Helper()
		id, _ := ts.legacyTask(session, args)
		res := ts.legacyResult(session, id)
		if res["isError"] != true || !strings.Contains(text(res), want) {
			t.Errorf("task over a cap: %v, want an error naming %s", res, want)
		}
	}
	file := func(n int) string {
		return fmt.Sprintf(`{"language":"python","code":"wait","files":[{"path":"f","content":%q}]}`, strings.Repeat("x", n))
	}
	ts.legacyTask(a, file(500))
	refusedWith(a, file(200), "CODE_EXEC_MAX_TASK_BYTES_PER_CLIENT")
	ts.legacyTask(a, `{"language":"python","code":"wait"}`)
	refusedWith(a, `{"language":"python","code":"wait"}`, "CODE_EXEC_MAX_TASKS_PER_CLIENT")
	// Client B is not held back by A's caps, only by the server's bytes.
	ts.legacyTask(b, file(400))
	refusedWith(b, file(200), "CODE_EXEC_MAX_TASK_BYTES")
	// Over 2026-07-28 the refusal is the call's result.
	for range 2 {
		res, _ := ts.modern("tools/call", `{"name":"code_execute","arguments":{"language":"python","code":"wait"}}`, true)
		if res["resultType"] != "task" {
			t.Fatalf("tools/call = %v, want a task", res)
		}
	}
	res, rerr := ts.modern("tools/call", `{"name":"code_execute","arguments":{"language":"python","code":"wait"}}`, true)
	if rerr != nil || res["resultType"] != "complete" || res["isError"] != true || !strings.Contains(text(res), "CODE_EXEC_MAX_TASKS_PER_CLIENT") {
		t.Errorf("a third 2026-07-28 task = %v %v, want a complete isError result naming CODE_EXEC_MAX_TASKS_PER_CLIENT", res, rerr)
	}
}
