package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/server/tasks"
)

// Long runs as MCP tasks. Two protocols reach the same tasks.Store:
//
//   - 2025-11-25: the client sends tools/call with params.task; mcp-go
//     creates its task, answers tasks/get, tasks/result, tasks/list and
//     tasks/cancel, and runs the handler in the background. The handler
//     (executeLegacyTask) runs the code as a task of the Store, whose
//     context outlives the request (mcp-go cancels the handler's context
//     as soon as it has answered with the task), and waits for it; hooks
//     link mcp-go's task id to the Store's, so that tasks/cancel stops
//     the run.
//   - 2026-07-28, the extension io.modelcontextprotocol/tasks: mcp-go has
//     no support for it, so extensionMessage handles it before mcp-go sees
//     the message (taskExtension over streamable HTTP, stdioTasks on
//     stdio; the SSE transport speaks only older protocols): a tools/call of code_execute from a
//     client that declares the extension gets a CreateTaskResult
//     (resultType "task") at once, and tasks/get, tasks/update and
//     tasks/cancel are answered from the Store. The call itself runs
//     through mcp-go in the background; when it needs input (an approval),
//     the task is input_required and the answers of tasks/update are
//     handed back to the call as a multi-round-trip retry.

// TasksExtension is the identifier of the 2026-07-28 tasks extension.
const TasksExtension = "io.modelcontextprotocol/tasks"

// Error codes of the tasks extension.
const (
	codeMissingCapability = -32021
)

// taskCtxKey marks the context of a call that runs as a task.
type taskCtxKey struct{}

// inTask reports whether ctx is that of a call that runs as a task.
func inTask(ctx context.Context) bool { v, _ := ctx.Value(taskCtxKey{}).(bool); return v }

// taskContext has the values of one context (the request's: session,
// peer, protocol) and the lifetime of another (the task's).
type taskContext struct {
	context.Context
	values context.Context
}

func (c taskContext) Value(key any) any {
	if key == (taskCtxKey{}) {
		return true
	}
	return c.values.Value(key)
}

// legacyLinks ties mcp-go's 2025-11-25 tasks to the Store's.
type legacyLinks struct {
	mu sync.Mutex
	// byCtx: the link token of a task-augmented call, from BeforeCallTool
	// to OnTaskCreated (both see the request's context).
	byCtx map[context.Context]string
	// mcpID: the mcp-go task id of a link token, until the handler takes it.
	mcpID map[string]string
	// store: the Store task (owner and id) of an mcp-go task id.
	store map[string][2]string
}

// linkHeader carries the link token from BeforeCallTool to the handler.
const linkHeader = "X-Codeexec-Task-Link"

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// installTaskHooks links mcp-go's tasks to the Store.
func (s *Server) installTaskHooks(hooks *mcpserver.Hooks, th *mcpserver.TaskHooks) {
	l := &s.links
	l.byCtx, l.mcpID, l.store = map[context.Context]string{}, map[string]string{}, map[string][2]string{}
	hooks.AddBeforeCallTool(func(ctx context.Context, _ any, req *mcp.CallToolRequest) {
		if req.Params.Task == nil || req.Params.Name != ToolExecute {
			return
		}
		// mcp-go drops its task (and the result) ttl after its creation:
		// keep it as long as the Store keeps the run and its result.
		if lt := s.opts.TaskLifetime; lt > 0 {
			ms := lt.Milliseconds()
			req.Params.Task = &mcp.TaskParams{TTL: &ms}
		}
		token := newToken()
		h := req.Header.Clone()
		if h == nil {
			h = http.Header{}
		}
		h.Set(linkHeader, token)
		req.Header = h
		l.mu.Lock()
		l.byCtx[ctx] = token
		l.mu.Unlock()
	})
	forget := func(ctx context.Context) {
		l.mu.Lock()
		delete(l.byCtx, ctx)
		l.mu.Unlock()
	}
	hooks.AddAfterCallTool(func(ctx context.Context, _ any, _ *mcp.CallToolRequest, _ any) { forget(ctx) })
	hooks.AddOnError(func(ctx context.Context, _ any, method mcp.MCPMethod, _ any, _ error) {
		if method == mcp.MethodToolsCall {
			forget(ctx)
		}
	})
	th.AddOnTaskCreated(func(ctx context.Context, m mcpserver.TaskMetrics) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if token, ok := l.byCtx[ctx]; ok {
			delete(l.byCtx, ctx)
			l.mcpID[token] = m.TaskID
		}
	})
	th.AddOnTaskCancelled(func(ctx context.Context, m mcpserver.TaskMetrics) {
		l.mu.Lock()
		st, ok := l.store[m.TaskID]
		l.mu.Unlock()
		if ok {
			// mcp-go holds its task lock while it calls this hook, and
			// the handler needs it to finish: cancel without waiting.
			go func() { _, _ = s.tasks.Cancel(st[0], st[1]) }()
		}
	})
}

// executeLegacyTask runs a 2025-11-25 task-augmented call of code_execute:
// as a task of the Store, which outlives ctx (mcp-go ends ctx once it has
// answered with its task).
func (s *Server) executeLegacyTask(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	l := &s.links
	l.mu.Lock()
	mcpID, linked := l.mcpID[req.Header.Get(linkHeader)]
	delete(l.mcpID, req.Header.Get(linkHeader))
	l.mu.Unlock()

	owner := ""
	if sess := mcpserver.ClientSessionFromContext(ctx); sess != nil {
		owner = sess.SessionID()
	}
	values := context.WithoutCancel(ctx)
	task, err := s.tasks.Create(owner, 0, func(tctx context.Context, _ tasks.Input) (any, error) {
		return s.execute(taskContext{Context: tctx, values: values}, req), nil
	})
	if err != nil {
		return mcp.NewToolResultError(fmt.Sprintf("The run could not be started as a task: %v. Try again later, or call without a task.", err)), nil
	}
	if linked {
		l.mu.Lock()
		l.store[mcpID] = [2]string{owner, task.ID}
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			delete(l.store, mcpID)
			l.mu.Unlock()
		}()
	}
	s.log.Info("task started", "task", task.ID, "protocol", "2025-11-25", "mcp_task", mcpID)
	done, err := s.tasks.Wait(context.Background(), owner, task.ID)
	if err != nil {
		return nil, err
	}
	switch {
	case done.Status == tasks.StatusCancelled:
		return nil, context.Canceled
	case done.Err != nil:
		return nil, done.Err
	}
	res, _ := done.Result.(*mcp.CallToolResult)
	return res, nil
}

// taskExtension serves the 2026-07-28 tasks extension on the streamable
// HTTP endpoint, in front of mcp-go (next).
func (s *Server) taskExtension(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		version := r.Header.Get(mcp.HeaderProtocolVersion)
		if r.Method != http.MethodPost || !mcp.IsModernProtocol(version) || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
			next.ServeHTTP(w, r)
			return
		}
		values := context.WithValue(context.WithoutCancel(r.Context()), peerKey{}, peer{transport: TransportHTTP, remote: r.RemoteAddr})
		answer, ok := s.extensionMessage(values, body, version)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer())
	})
}

// stdioTasks serves the 2026-07-28 tasks extension on stdio: it takes the
// messages that are the extension's (see utf8Lines.intercept) and answers
// them off the read loop (tasks/cancel waits for the run to stop).
func (s *Server) stdioTasks(line []byte, reply func([]byte)) bool {
	values := context.WithValue(context.Background(), peerKey{}, peer{transport: TransportStdio})
	answer, ok := s.extensionMessage(values, line, "")
	if ok {
		go func() { reply(answer()) }()
	}
	return ok
}

// extensionMessage recognises a message of the extension: tasks/get,
// tasks/update or tasks/cancel of protocol 2026-07-28, or a tools/call of
// code_execute whose client declares the extension (a task is made of it).
// It returns the function that answers it; anything else is left to mcp-go
// (ok is false). headerVersion is the protocol version the transport
// states ("" on stdio); values gives a task's call its peer.
func (s *Server) extensionMessage(values context.Context, body []byte, headerVersion string) (answer func() []byte, ok bool) {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || len(msg.ID) == 0 || bytes.Equal(msg.ID, []byte("null")) {
		return nil, false
	}
	var p taskParams
	_ = json.Unmarshal(msg.Params, &p)
	version := p.Meta.version()
	if !mcp.IsModernProtocol(version) || (headerVersion != "" && version != headerVersion) {
		return nil, false // older protocols are mcp-go's; it answers a mismatch
	}
	var handle func() (any, *taskRPCError)
	switch msg.Method {
	case "tasks/get", "tasks/update", "tasks/cancel":
		handle = func() (any, *taskRPCError) {
			if !p.Meta.declaresTasks() {
				return nil, &taskRPCError{Code: codeMissingCapability, Message: "Missing required client capability",
					Data: map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}}
			}
			return s.taskMethod(msg.Method, p)
		}
	case string(mcp.MethodToolsCall):
		if p.Name != ToolExecute || !p.Meta.declaresTasks() {
			return nil, false
		}
		handle = func() (any, *taskRPCError) { return s.startModernTask(values, body) }
	default:
		return nil, false
	}
	return func() []byte {
		res, rerr := handle()
		out := map[string]any{"jsonrpc": "2.0", "id": msg.ID}
		if rerr != nil {
			out["error"] = rerr
		} else {
			out["result"] = res
		}
		b, err := json.Marshal(out)
		if err != nil {
			b, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "error": taskRPCError{Code: mcp.INTERNAL_ERROR, Message: err.Error()}})
		}
		return b
	}, true
}

// taskParams is what the extension reads of a request's params.
type taskParams struct {
	Name           string                     `json:"name"`
	TaskID         string                     `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
	Meta           requestMeta                `json:"_meta"`
}

type requestMeta map[string]json.RawMessage

func (m requestMeta) version() string {
	var v string
	_ = json.Unmarshal(m[mcp.MetaKeyProtocolVersion], &v)
	return v
}

// declaresTasks reports whether the request's client capabilities include
// the tasks extension.
func (m requestMeta) declaresTasks() bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(m[mcp.MetaKeyClientCapabilities], &caps) != nil {
		return false
	}
	_, ok := caps.Extensions[TasksExtension]
	return ok
}

// taskRPCError is a JSON-RPC error object.
type taskRPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *taskRPCError) Error() string { return e.Message }

// modernOwner is the owner of 2026-07-28 tasks: that protocol has no
// sessions, so every client that may call the server (holds its token)
// shares one owner; task ids are unguessable.
const modernOwner = "2026-07-28"

// taskObject renders a task as the extension's Task (with result, error or
// inputRequests as its status has them).
func taskObject(t tasks.Task) map[string]any {
	o := map[string]any{
		"taskId":         t.ID,
		"status":         string(t.Status),
		"createdAt":      t.CreatedAt.UTC().Format(time.RFC3339),
		"lastUpdatedAt":  t.UpdatedAt.UTC().Format(time.RFC3339),
		"ttlMs":          t.TTL.Milliseconds(),
		"pollIntervalMs": t.PollInterval.Milliseconds(),
	}
	if t.StatusMessage != "" {
		o["statusMessage"] = t.StatusMessage
	}
	switch t.Status {
	case tasks.StatusCompleted:
		o["result"] = t.Result
	case tasks.StatusFailed:
		var re *taskRPCError
		if !errors.As(t.Err, &re) {
			re = &taskRPCError{Code: mcp.INTERNAL_ERROR, Message: t.StatusMessage}
		}
		o["error"] = re
	case tasks.StatusInputRequired:
		o["inputRequests"] = t.InputRequests
	}
	return o
}

// taskMethod answers tasks/get, tasks/update and tasks/cancel.
func (s *Server) taskMethod(method string, p taskParams) (any, *taskRPCError) {
	if s.tasks == nil {
		return nil, &taskRPCError{Code: mcp.METHOD_NOT_FOUND, Message: "tasks are not enabled on this server"}
	}
	notFound := func(err error) *taskRPCError {
		return &taskRPCError{Code: mcp.INVALID_PARAMS, Message: "Failed to retrieve task: " + err.Error()}
	}
	switch method {
	case "tasks/get":
		t, err := s.tasks.Get(modernOwner, p.TaskID)
		if err != nil {
			return nil, notFound(err)
		}
		o := taskObject(t)
		o["resultType"] = "complete"
		return o, nil
	case "tasks/update":
		err := s.tasks.Update(modernOwner, p.TaskID, p.InputResponses)
		if errors.Is(err, tasks.ErrNotFound) {
			return nil, notFound(err)
		}
		// Answers to a task that has ended are ignored, as the
		// extension asks of answers to requests that are not open.
		return map[string]any{"resultType": "complete"}, nil
	default: // tasks/cancel
		_, err := s.tasks.Cancel(modernOwner, p.TaskID)
		if errors.Is(err, tasks.ErrNotFound) {
			return nil, notFound(err)
		}
		return map[string]any{"resultType": "complete"}, nil
	}
}

// startModernTask creates the task of a 2026-07-28 tools/call and answers
// with its CreateTaskResult.
func (s *Server) startModernTask(values context.Context, body []byte) (any, *taskRPCError) {
	call, err := withoutTasksCapability(body)
	if err != nil {
		return nil, &taskRPCError{Code: mcp.INVALID_PARAMS, Message: err.Error()}
	}
	t, err := s.tasks.Create(modernOwner, 0, func(tctx context.Context, in tasks.Input) (any, error) {
		return s.runModernCall(taskContext{Context: tctx, values: values}, call, in)
	})
	if err != nil {
		return nil, &taskRPCError{Code: mcp.INTERNAL_ERROR, Message: "the run could not be started as a task: " + err.Error()}
	}
	s.log.Info("task started", "task", t.ID, "protocol", "2026-07-28")
	o := taskObject(t)
	o["resultType"] = "task"
	return o, nil
}

// withoutTasksCapability removes the tasks extension from the call's
// client capabilities, so that mcp-go runs it as a plain call.
func withoutTasksCapability(body []byte) ([]byte, error) {
	var msg map[string]any
	if err := json.Unmarshal(body, &msg); err != nil {
		return nil, fmt.Errorf("invalid request: %w", err)
	}
	params, _ := msg["params"].(map[string]any)
	meta, _ := params["_meta"].(map[string]any)
	caps, _ := meta[mcp.MetaKeyClientCapabilities].(map[string]any)
	if ext, ok := caps["extensions"].(map[string]any); ok {
		delete(ext, TasksExtension)
	}
	return json.Marshal(msg)
}

// runModernCall runs the call through mcp-go; when it needs input, the task
// asks the client (tasks/get shows the requests, tasks/update answers them)
// and the call is retried with the answers and its state.
func (s *Server) runModernCall(ctx context.Context, call []byte, in tasks.Input) (any, error) {
	for round := 1; ; round++ {
		resp := s.mcp.HandleMessage(ctx, call)
		raw, err := json.Marshal(resp)
		if err != nil {
			return nil, fmt.Errorf("encoding the result: %w", err)
		}
		var out struct {
			Result json.RawMessage `json:"result"`
			Error  *taskRPCError   `json:"error"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, fmt.Errorf("decoding the result: %w", err)
		}
		if out.Error != nil {
			return nil, out.Error
		}
		var ask struct {
			ResultType    string                     `json:"resultType"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  string                     `json:"requestState"`
		}
		_ = json.Unmarshal(out.Result, &ask)
		if ask.ResultType != string(mcp.ResultTypeInputRequired) {
			return out.Result, nil
		}
		// Keys must be new in each round of a task.
		requests := map[string]any{}
		for k, v := range ask.InputRequests {
			requests[roundKey(k, round)] = v
		}
		answers, err := in.Ask(ctx, requests)
		if err != nil {
			return nil, err
		}
		responses := map[string]json.RawMessage{}
		for k := range ask.InputRequests {
			responses[k] = answers[roundKey(k, round)]
		}
		if call, err = withRoundTrip(call, responses, ask.RequestState); err != nil {
			return nil, err
		}
	}
}

func roundKey(k string, round int) string {
	if round == 1 {
		return k
	}
	return fmt.Sprintf("%s-%d", k, round)
}

// withRoundTrip puts the answers and the state in the call's params.
func withRoundTrip(call []byte, responses map[string]json.RawMessage, state string) ([]byte, error) {
	var msg map[string]any
	if err := json.Unmarshal(call, &msg); err != nil {
		return nil, err
	}
	params, _ := msg["params"].(map[string]any)
	if params == nil {
		params = map[string]any{}
		msg["params"] = params
	}
	params["inputResponses"] = responses
	if state != "" {
		params["requestState"] = state
	} else {
		delete(params, "requestState")
	}
	return json.Marshal(msg)
}
