package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/server/replicas"
)

// Replicas behind one address (Options.Replicas): every id the server
// issues starts with its replica's id (MCP session ids, codeexec session
// ids, task ids, the run ids of artifact URIs, approval request ids), and
// route finds, in a request of the HTTP transports, the id that decides
// which replica serves it:
//
//   - the MCP session (Mcp-Session-Id of streamable HTTP, sessionId of
//     SSE's message endpoint): everything of a client with a session,
//     its streams, tasks, codeexec sessions and artifacts, lives in the
//     replica of its MCP session;
//   - without one (protocol 2026-07-28 has no sessions), the id the
//     message names: the taskId of tasks/get, tasks/result and
//     tasks/cancel, the session_id argument of a tool call (or the
//     approval request of its requestState), the URI of resources/read.
//
// A request whose id is another replica's is forwarded to it (see
// replicas.Set.Forward); one that names no id, or one of this replica's,
// is served here.

// route says which replica owns the id r names. The body of a POST is
// read (within the limit of limitBody) and put back.
func (s *Server) route(r *http.Request) replicas.Route {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			TaskID       string `json:"taskId"`
			URI          string `json:"uri"`
			RequestState string `json:"requestState"`
			Arguments    struct {
				SessionID string `json:"session_id"`
			} `json:"arguments"`
		} `json:"params"`
	}
	if r.Method == http.MethodPost && r.Body != nil {
		b, err := io.ReadAll(r.Body)
		rest := io.Reader(bytes.NewReader(nil))
		if err != nil {
			rest = errReader{err} // over the limit: it fails there as it would have
		}
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), rest))
		if err == nil {
			_ = json.Unmarshal(b, &msg) // a batch or bad JSON names nothing
		}
	}
	rt := replicas.Route{ID: msg.ID, What: "session", NotFound: true}
	if id := r.Header.Get(mcpserver.HeaderKeySessionID); id != "" {
		rt.Replica = replicas.Owner(id)
		return rt
	}
	if id := r.URL.Query().Get("sessionId"); id != "" && r.URL.Path == "/message" {
		rt.Replica = replicas.Owner(id)
		return rt
	}
	rt.NotFound = false
	switch msg.Method {
	case "tasks/get", "tasks/result", "tasks/cancel":
		rt.What, rt.Replica = "task", replicas.Owner(msg.Params.TaskID)
	case "tools/call":
		rt.Replica = replicas.Owner(msg.Params.Arguments.SessionID)
		if id := approvals.StateRequestID(msg.Params.RequestState); id != "" {
			// An answer to an approval request goes to the replica that
			// asked (and issued the state's single-use nonce).
			rt.What, rt.Replica = "approval request", replicas.Owner(id)
		}
	case "resources/read":
		if runID, _, err := artifacts.ParseURI(msg.Params.URI); err == nil {
			rt.What, rt.Replica = "artifact", replicas.Owner(runID)
		}
	}
	return rt
}
