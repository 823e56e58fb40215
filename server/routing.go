package server

import (
	"bytes"
	"context"
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
		rt.Names = id
	} else if id := r.URL.Query().Get("sessionId"); id != "" && r.URL.Path == "/message" {
		rt.Names = id
	} else {
		rt.NotFound = false
		switch msg.Method {
		case "tasks/get", "tasks/result", "tasks/cancel":
			rt.What, rt.Names = "task", msg.Params.TaskID
		case "tools/call":
			rt.Names = msg.Params.Arguments.SessionID
			if id := approvals.StateRequestID(msg.Params.RequestState); id != "" {
				// An answer to an approval request goes to the replica
				// that asked (and issued the state's single-use nonce).
				rt.What, rt.Names = "approval request", id
			}
		case "resources/read":
			if runID, _, err := artifacts.ParseURI(msg.Params.URI); err == nil {
				rt.What, rt.Names = "artifact", runID
			}
		}
	}
	rt.Replica = replicas.Owner(rt.Names)
	return rt
}

// Drain makes the HTTP transports refuse, with 503, what would start
// something new here (a new MCP session, a call that names no session,
// task or artifact), so that a load balancer sends it elsewhere, while the
// requests of what exists go on. It cannot be undone.
func (s *Server) Drain() { s.draining.Store(true) }

// WaitRequests waits until no HTTP request but the streams (GET) is in
// flight, or ctx ends; it returns how many are left.
func (s *Server) WaitRequests(ctx context.Context) int { return s.requests.Wait(ctx) }

// countRequests counts the requests in flight that are not streams (those
// forwarded to a peer included), for WaitRequests.
func (s *Server) countRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			defer s.requests.Begin()()
		}
		next.ServeHTTP(w, r)
	})
}

// refuseWhileDraining is the HTTP transports' side of Drain.
func (s *Server) refuseWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			if rt := s.route(r); rt.Names == "" && (r.Method == http.MethodPost || r.URL.Path == "/sse") {
				w.Header().Set("Retry-After", "1")
				replicas.WriteRPCError(w, http.StatusServiceUnavailable, rt.ID, -32603,
					"this server is shutting down: it takes no new session or run; try again (another replica, if any, takes it)")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
