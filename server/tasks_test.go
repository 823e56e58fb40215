package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/server/tasks"
)

// taskServer serves a Server with tasks over streamable HTTP.
type taskServer struct {
	t     *testing.T
	url   string
	store *tasks.Memory
}

func newTaskServer(t *testing.T, runner sandbox.Runner) *taskServer {
	t.Helper()
	return newTaskServerWith(t, runner, tasks.Config{}, nil)
}

// newTaskServerWith is newTaskServer with the store's caps in cfg (its poll
// interval and cancel grace are the tests') and edit's changes to the
// server's options.
func newTaskServerWith(t *testing.T, runner sandbox.Runner, cfg tasks.Config, edit func(*Options)) *taskServer {
	t.Helper()
	cfg.PollInterval, cfg.CancelGrace = 10*time.Millisecond, 5*time.Second
	store := tasks.NewMemory(cfg)
	t.Cleanup(func() { _ = store.Close() })
	opts := testOptions()
	opts.Tasks = store
	opts.TaskMaxTimeout = time.Hour
	opts.TaskLifetime = 2 * time.Hour
	opts.Elicit = true
	if edit != nil {
		edit(&opts)
	}
	s := New(runner, opts)
	h, shutdown, err := s.HTTPHandler(TransportHTTP, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		_ = shutdown(context.Background())
		srv.Close()
	})
	return &taskServer{t: t, url: srv.URL + "/mcp", store: store}
}

// rpc posts one JSON-RPC message and returns the response's result or
// error, read from JSON or from an SSE stream.
func (ts *taskServer) rpc(version, session, body string, extra ...string) (result, rpcErr map[string]any, header http.Header) {
	ts.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, ts.url, strings.NewReader(body))
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", version)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusAccepted {
		return nil, nil, resp.Header
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(d, `"id"`) {
				raw = []byte(d)
			}
		}
	}
	var msg struct {
		Result map[string]any `json:"result"`
		Error  map[string]any `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		ts.t.Fatalf("response %s: %q: %v", resp.Status, raw, err)
	}
	return msg.Result, msg.Error, resp.Header
}

// modernMeta is the _meta of a 2026-07-28 request; withTasks declares the
// tasks extension.
func modernMeta(withTasks bool) string {
	ext := ""
	if withTasks {
		ext = `"extensions":{"io.modelcontextprotocol/tasks":{}},`
	}
	return `{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},` +
		`"io.modelcontextprotocol/clientCapabilities":{` + ext + `"elicitation":{}}}`
}

func (ts *taskServer) modern(method, params string, withTasks bool) (map[string]any, map[string]any) {
	ts.t.Helper()
	params = strings.TrimSuffix(params, "}")
	if params != "{" {
		params += ","
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":%s"_meta":%s}}`, method, params, modernMeta(withTasks))
	var p struct{ Name, TaskID string }
	_ = json.Unmarshal([]byte(params+`"x":0}`), &p)
	res, rerr, _ := ts.rpc("2026-07-28", "", body, "Mcp-Method", method, "Mcp-Name", p.Name+p.TaskID)
	return res, rerr
}

// pollModern polls tasks/get until the task's status is one of want.
func (ts *taskServer) pollModern(id string, want ...string) map[string]any {
	ts.t.Helper()
	var res map[string]any
	waitFor(ts.t, fmt.Sprintf("task %s to be %v", id, want), func() bool {
		var rerr map[string]any
		if res, rerr = ts.modern("tasks/get", fmt.Sprintf(`{"taskId":%q}`, id), true); rerr != nil {
			ts.t.Fatalf("tasks/get: %v", rerr)
		}
		return slices.Contains(want, fmt.Sprint(res["status"]))
	})
	return res
}

func countingRunner(runs *atomic.Int32) *sandboxtest.Fake {
	return &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Languages: []sandbox.LanguageStatus{{Name: "python", Available: true}}},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			runs.Add(1)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return &sandbox.Result{Stdout: "ran " + req.Code + "\n", Sandbox: sandbox.ModeProcess}, nil
		},
	}
}

// TestModernTask: a 2026-07-28 client that declares the extension gets a
// task, whose result tasks/get embeds once it is done.
func TestModernTask(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	ts := newTaskServer(t, countingRunner(&runs))
	res, rerr := ts.modern("tools/call", `{"name":"code_execute","arguments":{"language":"python","code":"x","timeout_seconds":3000}}`, true)
	if rerr != nil {
		t.Fatalf("tools/call: %v", rerr)
	}
	id, _ := res["taskId"].(string)
	if res["resultType"] != "task" || id == "" || res["status"] != "working" || res["pollIntervalMs"] != 10.0 || res["ttlMs"] == nil {
		t.Fatalf("tools/call answered %v, want a CreateTaskResult (resultType task) that works", res)
	}
	done := ts.pollModern(id, "completed", "failed", "cancelled")
	result, _ := done["result"].(map[string]any)
	sc, _ := result["structuredContent"].(map[string]any)
	if done["status"] != "completed" || done["resultType"] != "complete" || sc["stdout"] != "ran x\n" || result["isError"] == true {
		t.Fatalf("finished task = %v, want completed with the run's result (a timeout above CODE_EXEC_MAX_TIMEOUT is fine for a task)", done)
	}
	if runs.Load() != 1 {
		t.Errorf("%d runs, want 1", runs.Load())
	}
}

// TestModernWithoutExtension: a client that does not declare the
// extension gets a plain result, and may not use the tasks methods.
func TestModernWithoutExtension(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	ts := newTaskServer(t, countingRunner(&runs))
	res, rerr := ts.modern("tools/call", `{"name":"code_execute","arguments":{"language":"python","code":"y"}}`, false)
	if rerr != nil || res["resultType"] != "complete" || res["taskId"] != nil {
		t.Fatalf("tools/call without the extension = %v %v, want a complete result", res, rerr)
	}
	_, rerr = ts.modern("tasks/get", `{"taskId":"abc"}`, false)
	if rerr == nil || rerr["code"] != -32021.0 {
		t.Errorf("tasks/get without the extension: %v, want error -32021", rerr)
	}
	_, rerr = ts.modern("tasks/get", `{"taskId":"abc"}`, true)
	if rerr == nil || rerr["code"] != -32602.0 {
		t.Errorf("tasks/get of an unknown task: %v, want error -32602", rerr)
	}
}

// TestModernTaskCancel: tasks/cancel stops the run; the ack comes once the
// run has been stopped (that Cancel waits for the work, however long it
// takes to clean up, is the store's TestCancelStopsTheWorkFirst).
func TestModernTaskCancel(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	var stopped atomic.Bool
	ts := newTaskServer(t, &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			close(started)
			<-ctx.Done()
			stopped.Store(true)
			return nil, ctx.Err()
		},
	})
	res, _ := ts.modern("tools/call", `{"name":"code_execute","arguments":{"language":"bash","code":"sleep 600","timeout_seconds":900}}`, true)
	id, _ := res["taskId"].(string)
	select {
	case <-started:
	case <-time.After(time.Minute): // bounds a hang only
		t.Fatalf("the task's run did not start; tools/call answered %v", res)
	}
	ack, rerr := ts.modern("tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, id), true)
	if rerr != nil || ack["resultType"] != "complete" {
		t.Fatalf("tasks/cancel = %v %v", ack, rerr)
	}
	if !stopped.Load() {
		t.Error("tasks/cancel answered before the run was stopped")
	}
	if got := ts.pollModern(id, "cancelled", "completed", "failed"); got["status"] != "cancelled" {
		t.Errorf("after tasks/cancel: %v, want cancelled", got)
	}
}

// TestModernTaskApproval: a run that needs approval makes the task
// input_required; the answer in tasks/update lets it run.
func TestModernTaskApproval(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	gate := approvals.NewGate(countingRunner(&runs), approvals.GateConfig{Policy: approvals.PolicyAlways, Timeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { gate.Close() })
	ts := newTaskServerWith(t, gate, tasks.Config{}, func(o *Options) { o.Approvals = gate })
	res, _ := ts.modern("tools/call", `{"name":"code_execute","arguments":{"language":"python","code":"z"}}`, true)
	id, _ := res["taskId"].(string)
	asking := ts.pollModern(id, "input_required")
	reqs, _ := asking["inputRequests"].(map[string]any)
	ask, _ := reqs[approvalInputID].(map[string]any)
	if ask["method"] != "elicitation/create" || runs.Load() != 0 {
		t.Fatalf("input_required task = %v, want an elicitation for the approval and no run yet", asking)
	}
	ack, rerr := ts.modern("tasks/update", fmt.Sprintf(`{"taskId":%q,"inputResponses":{%q:{"action":"accept","content":{"approve":true}}}}`, id, approvalInputID), true)
	if rerr != nil || ack["resultType"] != "complete" {
		t.Fatalf("tasks/update = %v %v", ack, rerr)
	}
	done := ts.pollModern(id, "completed", "failed", "cancelled")
	result, _ := done["result"].(map[string]any)
	sc, _ := result["structuredContent"].(map[string]any)
	if done["status"] != "completed" || sc["stdout"] != "ran z\n" || runs.Load() != 1 {
		t.Fatalf("approved task = %v (runs %d), want completed after one run", done, runs.Load())
	}
}

// TestLegacyTask: on protocol 2025-11-25, mcp-go's task for a call with
// params.task runs the code in the background, and tasks/cancel stops it.
func TestLegacyTask(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	blocked := make(chan struct{}, 1)
	// The first run ends once its tools/call request has been answered:
	// the task's run outlives the request that made it.
	answered := make(chan struct{})
	stopped := make(chan struct{})
	ts := newTaskServer(t, &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			runs.Add(1)
			if req.Code == "block" {
				blocked <- struct{}{}
				<-ctx.Done()
				close(stopped)
				return nil, ctx.Err()
			}
			select {
			case <-answered:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &sandbox.Result{Stdout: "ran\n", Sandbox: sandbox.ModeProcess}, nil
		},
	})
	init, _, h := ts.rpc("2025-11-25", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"raw","version":"1"}}}`)
	caps, _ := init["capabilities"].(map[string]any)
	if caps["tasks"] == nil {
		t.Fatalf("initialize: capabilities %v, want tasks", caps)
	}
	session := h.Get("Mcp-Session-Id")
	ts.rpc("2025-11-25", session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	tools, _, _ := ts.rpc("2025-11-25", session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if !strings.Contains(fmt.Sprint(tools), "taskSupport:optional") {
		t.Errorf("tools/list = %v, want code_execute with execution.taskSupport optional", tools)
	}

	created, rerr, _ := ts.rpc("2025-11-25", session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"ok","timeout_seconds":120},"task":{"ttl":60000}}}`)
	task, _ := created["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if rerr != nil || id == "" {
		t.Fatalf("tools/call with a task = %v %v", created, rerr)
	}
	close(answered)
	if task["ttl"] != 7200000.0 {
		t.Errorf("task ttl = %v, want the server's task lifetime (2h) instead of the 60s asked for", task["ttl"])
	}
	result, rerr, _ := ts.rpc("2025-11-25", session, fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":%q}}`, id))
	sc, _ := result["structuredContent"].(map[string]any)
	if rerr != nil || sc["stdout"] != "ran\n" {
		t.Fatalf("tasks/result = %v %v, want the run's result", result, rerr)
	}

	created, _, _ = ts.rpc("2025-11-25", session, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"block"},"task":{}}}`)
	task, _ = created["task"].(map[string]any)
	id, _ = task["taskId"].(string)
	select {
	case <-blocked:
	case <-time.After(time.Minute): // bounds a hang only
		t.Fatalf("the second task's run did not start; tools/call answered %v", created)
	}
	cancelled, rerr, _ := ts.rpc("2025-11-25", session, fmt.Sprintf(`{"jsonrpc":"2.0","id":6,"method":"tasks/cancel","params":{"taskId":%q}}`, id))
	if rerr != nil || cancelled["status"] != "cancelled" {
		t.Fatalf("tasks/cancel = %v %v", cancelled, rerr)
	}
	select {
	case <-stopped:
	case <-time.After(time.Minute): // bounds a hang only
		t.Fatal("the run did not stop after tasks/cancel")
	}
	if c := ts.store.Counts(); c[tasks.StatusCompleted] != 1 || c[tasks.StatusCancelled] != 1 {
		t.Errorf("store counts = %v, want one completed and one cancelled", c)
	}
}

// TestModernTaskOverStdio: the extension works on stdio too.
func TestModernTaskOverStdio(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	store := tasks.NewMemory(tasks.Config{PollInterval: 10 * time.Millisecond})
	t.Cleanup(func() { _ = store.Close() })
	opts := testOptions()
	opts.Tasks = store
	s := New(countingRunner(&runs), opts)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeStdio(ctx, inR, outW) }()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outR.Close() // a write the test no longer reads fails instead of waiting
		<-done
	})
	replies := bufio.NewScanner(outR)
	replies.Buffer(make([]byte, 1<<20), 1<<20)
	ask := func(id int, method, params string) map[string]any {
		t.Helper()
		params = strings.TrimSuffix(params, "}")
		if params != "{" {
			params += ","
		}
		fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s"_meta":%s}}`+"\n", id, method, params, modernMeta(true))
		for replies.Scan() {
			var msg struct {
				ID     int            `json:"id"`
				Result map[string]any `json:"result"`
				Error  map[string]any `json:"error"`
			}
			if json.Unmarshal(replies.Bytes(), &msg) == nil && msg.ID == id {
				if msg.Error != nil {
					t.Fatalf("%s: %v", method, msg.Error)
				}
				return msg.Result
			}
		}
		t.Fatalf("%s: no answer: %v", method, replies.Err())
		return nil
	}
	res := ask(1, "tools/call", `{"name":"code_execute","arguments":{"language":"python","code":"s"}}`)
	id, _ := res["taskId"].(string)
	if res["resultType"] != "task" || id == "" {
		t.Fatalf("tools/call over stdio = %v, want a task", res)
	}
	var got map[string]any
	waitFor(t, "the task to complete", func() bool {
		got = ask(2, "tasks/get", fmt.Sprintf(`{"taskId":%q}`, id))
		return got["status"] == "completed"
	})
	result, _ := got["result"].(map[string]any)
	if sc, _ := result["structuredContent"].(map[string]any); sc["stdout"] != "ran s\n" {
		t.Fatalf("completed task %v, want the run's stdout", got)
	}
}

func TestInfoNamesTheTaskCap(t *testing.T) {
	t.Parallel()
	store := tasks.NewMemory(tasks.Config{})
	t.Cleanup(func() { _ = store.Close() })
	opts := testOptions()
	opts.Tasks, opts.TaskMaxTimeout = store, 2*time.Hour
	fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}
	if got := New(fake, opts).Info().Limits.MaxTaskTimeoutSeconds; got != 7200 {
		t.Errorf("max_task_timeout_seconds = %v, want 7200", got)
	}
	if got := New(fake, testOptions()).Info().Limits.MaxTaskTimeoutSeconds; got != 0 {
		t.Errorf("without tasks max_task_timeout_seconds = %v, want it absent", got)
	}
}
