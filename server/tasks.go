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

	"github.com/codeexec/codeexec/sandbox/artifacts"
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
	// args: the arguments of a link token's call, decoded before mcp-go
	// copied the request, until the handler takes them.
	args map[string]ExecuteArgs
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
	l.byCtx, l.mcpID, l.store, l.args = map[context.Context]string{}, map[string]string{}, map[string][2]string{}, map[string]ExecuteArgs{}
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
		// The task keeps its arguments decoded, from now on: mcp-go
		// copies the request into the task's goroutine, and holds it (the
		// JSON text of the arguments, and their parsed copy) until the
		// handler returns, however long the task waits for a run slot.
		// Arguments that do not decode stay, for the call to say why.
		args, err := s.decodeTaskArgs(ctx, req.GetRawArguments())
		l.mu.Lock()
		l.byCtx[ctx] = token
		if err == nil {
			l.args[token] = args
			req.Params.RawArguments = nil
			if m, ok := req.Params.Arguments.(map[string]any); ok {
				for _, k := range []string{"code", "stdin", "files"} {
					delete(m, k)
				}
			}
		}
		l.mu.Unlock()
	})
	forget := func(ctx context.Context) {
		l.mu.Lock()
		if token, ok := l.byCtx[ctx]; ok {
			// No task was made of the call: nobody takes its arguments.
			delete(l.args, token)
		}
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
	token := req.Header.Get(linkHeader)
	l.mu.Lock()
	mcpID, linked := l.mcpID[token]
	delete(l.mcpID, token)
	args, decoded := l.args[token]
	delete(l.args, token)
	l.mu.Unlock()

	owner := s.owner(ctx)
	if !decoded {
		var err error
		if args, err = s.decodeTaskArgs(ctx, req.GetRawArguments()); err != nil {
			s.logRejected(ctx, ToolExecute, err)
			return mcp.NewToolResultError(err.Error()), nil
		}
	}
	values := context.WithValue(context.WithoutCancel(ctx), decodedArgsKey{}, args)
	task, err := s.tasks.Create(owner, 0, argBytes(args), func(tctx context.Context, _ tasks.Input) (any, error) {
		return s.execute(taskContext{Context: tctx, values: values}, req), nil
	})
	if err != nil {
		s.log.Info("task refused", "protocol", "2025-11-25", "reason", err.Error())
		return mcp.NewToolResultError(taskRefusal(err)), nil
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
	answer, ok := s.extensionMessage(s.stdioContext(context.Background()), line, "")
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
			return s.taskMethod(s.owner(values), msg.Method, p)
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

// Who owns a task (Server.owner, as for sessions): on 2025-11-25 the MCP
// client session that made it (which only its principal can use); on
// 2026-07-28, which has no sessions, its principal, all of whose clients
// are one owner. The store's caps per client count the tasks of each
// owner.

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

// taskMethod answers tasks/get, tasks/update and tasks/cancel of owner.
func (s *Server) taskMethod(owner, method string, p taskParams) (any, *taskRPCError) {
	if s.tasks == nil {
		return nil, &taskRPCError{Code: mcp.METHOD_NOT_FOUND, Message: "tasks are not enabled on this server"}
	}
	notFound := func(err error) *taskRPCError {
		return &taskRPCError{Code: mcp.INVALID_PARAMS, Message: "Failed to retrieve task: " + err.Error()}
	}
	switch method {
	case "tasks/get":
		t, err := s.tasks.Get(owner, p.TaskID)
		if err != nil {
			return nil, notFound(err)
		}
		o := taskObject(t)
		o["resultType"] = "complete"
		return o, nil
	case "tasks/update":
		err := s.tasks.Update(owner, p.TaskID, p.InputResponses)
		if errors.Is(err, tasks.ErrNotFound) {
			return nil, notFound(err)
		}
		// Answers to a task that has ended are ignored, as the
		// extension asks of answers to requests that are not open.
		return map[string]any{"resultType": "complete"}, nil
	default: // tasks/cancel
		_, err := s.tasks.Cancel(owner, p.TaskID)
		if errors.Is(err, tasks.ErrNotFound) {
			return nil, notFound(err)
		}
		return map[string]any{"resultType": "complete"}, nil
	}
}

// startModernTask creates the task of a 2026-07-28 tools/call and answers
// with its CreateTaskResult, or with a complete result that says why the
// server's task caps refused it.
func (s *Server) startModernTask(values context.Context, body []byte) (any, *taskRPCError) {
	call, args, decoded, err := s.modernTaskCall(values, body)
	if err != nil {
		return nil, &taskRPCError{Code: mcp.INVALID_PARAMS, Message: err.Error()}
	}
	bytes := int64(len(call))
	if decoded {
		values, bytes = context.WithValue(values, decodedArgsKey{}, args), argBytes(args)
	}
	t, err := s.tasks.Create(s.owner(values), 0, bytes, func(tctx context.Context, in tasks.Input) (any, error) {
		return s.runModernCall(taskContext{Context: tctx, values: values}, call, in)
	})
	if errors.Is(err, tasks.ErrTooMany) {
		s.log.Info("task refused", "protocol", "2026-07-28", "reason", err.Error())
		var refusal map[string]any
		b, _ := json.Marshal(mcp.NewToolResultError(taskRefusal(err)))
		_ = json.Unmarshal(b, &refusal)
		refusal["resultType"] = "complete"
		return refusal, nil
	}
	if err != nil {
		return nil, &taskRPCError{Code: mcp.INTERNAL_ERROR, Message: "the run could not be started as a task: " + err.Error()}
	}
	s.log.Info("task started", "task", t.ID, "protocol", "2026-07-28")
	o := taskObject(t)
	o["resultType"] = "task"
	return o, nil
}

// modernTaskCall turns a 2026-07-28 tools/call made a task into the call
// that mcp-go runs in the task: without the tasks extension in its client
// capabilities, so that mcp-go runs it as a plain call, and, when its
// arguments decode (decoded), without its code, stdin and files, which the
// task keeps decoded in args instead of as JSON text that each round would
// parse again. Arguments that do not decode stay, for the call to say why.
func (s *Server) modernTaskCall(ctx context.Context, body []byte) (call []byte, args ExecuteArgs, decoded bool, err error) {
	var msg map[string]any
	if err := json.Unmarshal(body, &msg); err != nil {
		return nil, args, false, fmt.Errorf("invalid request: %w", err)
	}
	params, _ := msg["params"].(map[string]any)
	meta, _ := params["_meta"].(map[string]any)
	caps, _ := meta[mcp.MetaKeyClientCapabilities].(map[string]any)
	if ext, ok := caps["extensions"].(map[string]any); ok {
		delete(ext, TasksExtension)
	}
	if raw, ok := params["arguments"].(map[string]any); ok {
		if args, err = s.decodeTaskArgs(ctx, raw); err == nil {
			decoded = true
			for _, k := range []string{"code", "stdin", "files"} {
				delete(raw, k)
			}
		}
	}
	call, err = json.Marshal(msg)
	return call, args, decoded, err
}

// decodedArgsKey carries, in a task's context, the arguments of its call,
// decoded when the task was made: execute takes them instead of decoding
// the call's (from which the large ones are gone).
type decodedArgsKey struct{}

// decodeTaskArgs decodes the arguments of a call of code_execute made a
// task, whose timeout may ask up to the task cap, for the caller of ctx.
func (s *Server) decodeTaskArgs(ctx context.Context, raw any) (ExecuteArgs, error) {
	opts := s.callOptions(ctx)
	opts.MaxTimeout = opts.TaskMaxTimeout
	return DecodeExecuteArgs(raw, opts)
}

// argBytes is what decoded arguments hold in memory: what a task counts
// against the byte caps of the task store.
func argBytes(a ExecuteArgs) int64 {
	n := int64(len(a.Code) + len(a.Stdin))
	for _, f := range a.Files {
		n += int64(len(f.Path) + len(f.Data))
	}
	return n
}

// taskRefusal is the sentence for a task that the store refused.
func taskRefusal(err error) string {
	var le *tasks.LimitError
	if !errors.As(err, &le) {
		return fmt.Sprintf("The run could not be started as a task: %v. Try again later, or call without a task.", err)
	}
	size := artifacts.FormatBytes
	switch le.Cap {
	case tasks.CapClientTasks:
		return fmt.Sprintf("The run was not started as a task: this client already has %d tasks queued or running, the most one client may have (CODE_EXEC_MAX_TASKS_PER_CLIENT); wait for one to end, cancel one, or call without a task.", le.Held)
	case tasks.CapClientBytes:
		return fmt.Sprintf("The run was not started as a task: this client's tasks that are queued or running hold %s of code, stdin and files, and this one's %s would pass the %s one client may hold (CODE_EXEC_MAX_TASK_BYTES_PER_CLIENT); wait for one to end, or send less.", size(le.Held), size(le.Adding), size(le.Max))
	case tasks.CapBytes:
		return fmt.Sprintf("The run was not started as a task: the tasks queued or running on this server hold %s of code, stdin and files, and this one's %s would pass the server's cap of %s (CODE_EXEC_MAX_TASK_BYTES); try again later, or send less.", size(le.Held), size(le.Adding), size(le.Max))
	}
	return fmt.Sprintf("The run was not started as a task: the server holds %d tasks, its most, and every one still works; try again later, or call without a task.", le.Held)
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
