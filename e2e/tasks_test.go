package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// The go-sdk client has no task support: these tests speak JSON-RPC over
// streamable HTTP by hand.

// taskClient is a raw streamable HTTP client for the task methods.
type taskClient struct {
	t       *testing.T
	url     string
	version string
	session string // 2025-11-25 only
	token   string // the bearer token, if any
	next    int
}

// newLegacyTaskClient opens a 2025-11-25 session.
func newLegacyTaskClient(t *testing.T, s *server) *taskClient {
	t.Helper()
	return newLegacyTaskClientAs(t, s, "")
}

// newLegacyTaskClientAs opens a 2025-11-25 session with a bearer token.
func newLegacyTaskClientAs(t *testing.T, s *server, token string) *taskClient {
	t.Helper()
	c := &taskClient{t: t, url: s.baseURL + "/mcp", version: "2025-11-25", token: token}
	res, rerr, h := c.post("initialize", `{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"raw-tasks","version":"1"}}`)
	if rerr != nil || res["protocolVersion"] != "2025-11-25" {
		t.Fatalf("initialize: %v %v", res, rerr)
	}
	caps, _ := res["capabilities"].(map[string]any)
	tc, _ := caps["tasks"].(map[string]any)
	if tc["cancel"] == nil || tc["requests"] == nil {
		t.Errorf("initialize: tasks capability %v, want cancel and tools/call requests", caps["tasks"])
	}
	c.session = h.Get("Mcp-Session-Id")
	c.notify("notifications/initialized")
	return c
}

// modernMeta is the _meta of a 2026-07-28 request that declares the tasks
// extension.
const modernTaskMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientInfo":{"name":"raw-tasks","version":"1"},` +
	`"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

func (c *taskClient) request(method, params string) *http.Request {
	c.t.Helper()
	var body string
	if c.version == "2026-07-28" {
		// Every 2026-07-28 request carries the protocol and capabilities.
		params = strings.TrimSuffix(strings.TrimSpace(params), "}")
		if params != "{" {
			params += ","
		}
		params += `"_meta":` + modernTaskMeta + `}`
	}
	if method == "" {
		body = params
	} else {
		c.next++
		body = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, c.next, method, params)
	}
	req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", c.version)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	if c.version == "2026-07-28" {
		var p struct{ Name, TaskID string }
		_ = json.Unmarshal([]byte(params), &p)
		req.Header.Set("Mcp-Method", method)
		req.Header.Set("Mcp-Name", p.Name+p.TaskID)
	}
	return req
}

// post sends a request and returns its result or error (from JSON or the
// last message of an SSE stream).
func (c *taskClient) post(method, params string) (result, rpcErr map[string]any, h http.Header) {
	c.t.Helper()
	resp, err := http.DefaultClient.Do(c.request(method, params))
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
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
		c.t.Fatalf("%s: %s %q: %v", method, resp.Status, raw, err)
	}
	return msg.Result, msg.Error, resp.Header
}

func (c *taskClient) notify(method string) {
	c.t.Helper()
	resp, err := http.DefaultClient.Do(c.request("", fmt.Sprintf(`{"jsonrpc":"2.0","method":%q}`, method)))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
}

// start calls code_execute as a task and returns the task id.
func (c *taskClient) start(args string) string {
	c.t.Helper()
	params := fmt.Sprintf(`{"name":"code_execute","arguments":%s}`, args)
	if c.version == "2025-11-25" {
		params = fmt.Sprintf(`{"name":"code_execute","arguments":%s,"task":{"ttl":600000}}`, args)
	}
	res, rerr, _ := c.post("tools/call", params)
	if rerr != nil {
		c.t.Fatalf("tools/call: %v", rerr)
	}
	task := res
	if c.version == "2025-11-25" {
		task, _ = res["task"].(map[string]any)
	} else if res["resultType"] != "task" {
		c.t.Fatalf("tools/call answered %v, want a CreateTaskResult (resultType task)", res)
	}
	id, _ := task["taskId"].(string)
	if id == "" || task["status"] != "working" {
		c.t.Fatalf("tools/call answered %v, want a working task", res)
	}
	return id
}

// get returns the task as tasks/get sees it.
func (c *taskClient) get(id string) map[string]any {
	c.t.Helper()
	res, rerr, _ := c.post("tasks/get", fmt.Sprintf(`{"taskId":%q}`, id))
	if rerr != nil {
		c.t.Fatalf("tasks/get: %v", rerr)
	}
	return res
}

// poll polls tasks/get every interval until the task ends, and returns it.
func (c *taskClient) poll(id string, interval, d time.Duration) map[string]any {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		task := c.get(id)
		switch task["status"] {
		case "completed", "failed", "cancelled":
			return task
		case "working":
		default:
			c.t.Fatalf("task status %v, want working until it ends", task["status"])
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s still works after %s", id, d)
		}
		time.Sleep(interval)
	}
}

// result returns the task's CallToolResult: embedded in tasks/get on
// 2026-07-28, from tasks/result on 2025-11-25.
func (c *taskClient) result(id string, task map[string]any) (map[string]any, execResult) {
	c.t.Helper()
	res, _ := task["result"].(map[string]any)
	if c.version == "2025-11-25" {
		var rerr map[string]any
		res, rerr, _ = c.post("tasks/result", fmt.Sprintf(`{"taskId":%q}`, id))
		if rerr != nil {
			c.t.Fatalf("tasks/result: %v", rerr)
		}
	}
	var out execResult
	b, _ := json.Marshal(res["structuredContent"])
	if err := json.Unmarshal(b, &out); err != nil || res["structuredContent"] == nil {
		c.t.Fatalf("the task's result %v has no structuredContent", res)
	}
	return res, out
}

func taskVersions() []string { return []string{"2025-11-25", "2026-07-28"} }

func newTaskClient(t *testing.T, s *server, version string) *taskClient {
	if version == "2025-11-25" {
		return newLegacyTaskClient(t, s)
	}
	return &taskClient{t: t, url: s.baseURL + "/mcp", version: version}
}

// TestTaskLongRun: a run longer than CODE_EXEC_MAX_TIMEOUT allows a plain
// call (set to 2 s here, so that the run need not last a minute) completes
// as a task and is polled to its result, on both protocols.
func TestTaskLongRun(t *testing.T) {
	sandboxtest.SkipShort(t, "the task runs 5 s, past CODE_EXEC_MAX_TIMEOUT")
	t.Parallel()
	for _, v := range taskVersions() {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			s := startHTTP(t, http_, serverEnv(t, map[string]string{"CODE_EXEC_TIMEOUT": "1s", "CODE_EXEC_MAX_TIMEOUT": "2s"}))
			c := newTaskClient(t, s, v)
			start := time.Now()
			id := c.start(`{"language":"bash","code":"echo started; sleep 5; echo finished","timeout_seconds":60}`)
			task := c.poll(id, 500*time.Millisecond, 3*time.Minute)
			if task["status"] != "completed" {
				t.Fatalf("task ended %v, want completed: %v", task["status"], task)
			}
			res, out := c.result(id, task)
			if res["isError"] == true || out.ExitCode != 0 || out.Stdout != "started\nfinished\n" || out.DurationMS < 5000 {
				t.Fatalf("result %v, want stdout started and finished after 5 s", res)
			}
			if took := time.Since(start); took < 5*time.Second {
				t.Errorf("the task completed after %s, before its 5 s run could", took)
			}
			// The same run as a plain call is over the cap.
			if v == "2026-07-28" {
				return
			}
			plain, _, _ := c.post("tools/call", `{"name":"code_execute","arguments":{"language":"bash","code":"true","timeout_seconds":60}}`)
			if plain["isError"] != true || !strings.Contains(fmt.Sprint(plain["content"]), "CODE_EXEC_MAX_TIMEOUT") {
				t.Errorf("a plain call with timeout_seconds 60 ran: %v; want it rejected above CODE_EXEC_MAX_TIMEOUT", plain)
			}
		})
	}
}

// TestTaskCancel: cancelling a task kills the run: no process is left in
// process mode, no container in docker mode, no run directory.
func TestTaskCancel(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"process", "docker"} {
		for _, v := range taskVersions() {
			t.Run(mode+"/"+v, func(t *testing.T) {
				t.Parallel()
				env := serverEnv(t, map[string]string{"CODE_EXEC_SANDBOX": mode})
				var instance string
				if mode == "docker" {
					dockerEngine(t)
					env["CODE_EXEC_DOCKER_POOL_SIZE"] = "0"
				}
				s := startHTTP(t, http_, env)
				c := newTaskClient(t, s, v)
				m := marker()
				id := c.start(fmt.Sprintf(`{"language":"bash","code":"sleep %s; echo finished","timeout_seconds":300}`, m))
				if mode == "docker" {
					instance = logField(s.stderr.String(), "docker sandbox ready", "instance")
					cli := dockerEngine(t)
					deadline := time.Now().Add(time.Minute)
					for len(containersOf(t, cli, instance)) == 0 {
						if time.Now().After(deadline) {
							t.Fatal("no run container appeared within a minute")
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
				waitAlive(t, m)
				if c.get(id)["status"] != "working" {
					t.Fatalf("task %v before the cancel, want working", c.get(id))
				}
				res, rerr, _ := c.post("tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, id))
				if rerr != nil {
					t.Fatalf("tasks/cancel: %v", rerr)
				}
				if v == "2025-11-25" && res["status"] != "cancelled" {
					t.Errorf("tasks/cancel answered %v, want the task cancelled", res)
				}
				waitGone(t, m)
				if mode == "docker" {
					cli := dockerEngine(t)
					var left []container.Summary
					waitFor(t, eventWait, "the run's containers to go after tasks/cancel", func() bool {
						left = containersOf(t, cli, instance)
						return len(left) == 0
					}, func() string { return "left: " + describeContainers(left) })
				}
				if got := c.get(id)["status"]; got != "cancelled" {
					t.Errorf("tasks/get after the cancel: status %v, want cancelled", got)
				}
				waitFor(t, eventWait, "the run directories to go after tasks/cancel", func() bool {
					left, _ := globRunDirs(s.workDir)
					return len(left) == 0
				})
			})
		}
	}
}

// TestProgressOutputLines: with a progress token, the output lines arrive
// as progress notifications in order while the program runs, and
// keep-alives arrive while it is silent. The program waits for the test:
// it ends only once the test has seen its lines and two keep-alives, so
// every notification it checks came while the program ran, however busy
// the machine (how often keep-alives come is server/progress's test, on
// synctest's clock).
func TestProgressOutputLines(t *testing.T) {
	sandboxtest.SkipShort(t, "waits for two keep-alives, 5 s apart (server/progress tests them on synctest's clock)")
	t.Parallel()
	for _, transport := range []string{stdio, http_} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			signal := t.TempDir()
			var (
				mu         sync.Mutex
				lines      []string
				keepAlives int
				released   bool
			)
			release := func() {
				if err := os.WriteFile(filepath.Join(signal, "go"), nil, 0o644); err != nil {
					t.Error(err)
				}
				released = true
			}
			cs, _ := connect(t, transport, serverEnv(t, map[string]string{"CODE_EXEC_WORKSPACE": signal}), connectOpts{client: &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					mu.Lock()
					defer mu.Unlock()
					if strings.Contains(req.Params.Message, "no new output") {
						keepAlives++
					} else {
						lines = append(lines, req.Params.Message)
					}
					if !released && len(lines) == 4 && keepAlives >= 2 {
						release()
					}
				},
			}})
			params := &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
				"language":        "bash",
				"code":            `for i in 1 2 3; do echo line $i; done; echo oops >&2; while [ ! -e "$WORKSPACE/go" ]; do sleep 0.05; done; echo after`,
				"timeout_seconds": 60, // a guard against a hang only
			}}
			params.SetProgressToken("progress-1")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := cs.CallTool(ctx, params)
			if err != nil || res.IsError {
				t.Fatalf("CallTool: %v %v", err, res)
			}
			// The last line's notification is handed to the transport
			// before the result, but mcp-go writes notifications from a
			// goroutine of its own: on a busy machine it may reach the
			// client just after the result.
			waitFor(t, eventWait, "the notification of the line after the wait", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(lines, "after")
			}, func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprintf("lines %q", lines) })
			mu.Lock()
			defer mu.Unlock()
			if !released {
				t.Fatalf("the program ended before the test had seen its four lines and two keep-alives: lines %q, %d keep-alives", lines, keepAlives)
			}
			// Each stream's lines come in order; stdout and stderr are two
			// pipes, so their lines interleave as they are read.
			var stdout, stderr []string
			for _, l := range lines {
				if strings.HasPrefix(l, "stderr: ") {
					stderr = append(stderr, l)
				} else {
					stdout = append(stdout, l)
				}
			}
			want := []string{"line 1", "line 2", "line 3", "after"}
			if strings.Join(stdout, "|") != strings.Join(want, "|") || len(stderr) != 1 || stderr[0] != "stderr: oops" {
				t.Fatalf("progress messages %q, want the stdout lines %q in order and the stderr line \"stderr: oops\"", lines, want)
			}
			if lines[len(lines)-1] != "after" {
				t.Errorf("progress messages %q: the line written after the wait is not last", lines)
			}
		})
	}
}
