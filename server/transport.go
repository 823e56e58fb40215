package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/codeexec/codeexec/server/cancels"
	"github.com/codeexec/codeexec/server/httpserve"
	"github.com/codeexec/codeexec/server/principals"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// Transport names how MCP clients reach the server. The values are those of
// CODE_EXEC_TRANSPORT.
type Transport string

// The transports.
const (
	TransportStdio Transport = "stdio"
	TransportSSE   Transport = "sse"
	TransportHTTP  Transport = "http" // streamable HTTP
)

// peer is how the client of a request is connected, for the approver to see.
type peer struct {
	transport Transport
	remote    string // the HTTP peer's address
}

type peerKey struct{}

func peerFrom(ctx context.Context) peer {
	p, _ := ctx.Value(peerKey{}).(peer)
	return p
}

// ServeStdio serves MCP on in and out until ctx is cancelled or in ends.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	// mcp-go runs tool calls on a worker pool (5 workers by default); size
	// it so that it never throttles below CODE_EXEC_MAX_CONCURRENCY: calls
	// beyond the concurrency limit wait, cancellable, in sandbox.Limit.
	const maxWorkers = 100
	if s.opts.MaxConcurrency > maxWorkers-10 {
		s.log.Warn("the stdio transport serves at most 100 tool calls at once", "max_concurrency", s.opts.MaxConcurrency)
	}
	stdio := mcpserver.NewStdioServer(s.mcp)
	mcpserver.WithWorkerPoolSize(maxWorkers)(stdio)
	mcpserver.WithQueueSize(10000)(stdio)
	stdio.SetErrorLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelWarn))
	// A tools/call waits in mcp-go's queue for a free worker before its
	// cancel function is registered; the Book keeps a cancellation read
	// in that time for the call's start (see package cancels).
	book := cancels.New()
	stdio.SetContextFunc(func(ctx context.Context) context.Context { return cancels.With(s.stdioContext(ctx), book) })
	// Every message is checked for valid UTF-8 before mcp-go decodes it
	// (see utf8check.go); the answers to those that are not share the
	// output with mcp-go's, one whole message per write.
	w := &lockedWriter{w: out}
	lines := &utf8Lines{in: bufio.NewReader(in), out: w, log: s.log, observe: book.Observe}
	if s.tasks != nil {
		lines.intercept = s.stdioTasks
	}
	err := stdio.Listen(ctx, lines, w)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// sseContext is the context of a message over SSE. mcp-go answers each
// message with 202 at once and handles it on a goroutine of its own, so a
// client's cancellation of a call can be handled before the call's
// cancel function is registered; this runs in the POST's handler, in the
// order of the POSTs, once mcp-go has found the session, and shows the
// message to the session's Book (see package cancels).
func (s *Server) sseContext(withPeer func(context.Context, *http.Request) context.Context) func(context.Context, *http.Request) context.Context {
	return func(ctx context.Context, r *http.Request) context.Context {
		ctx = withPeer(ctx, r)
		session := mcpserver.ClientSessionFromContext(ctx)
		if session == nil || r.Body == nil {
			return ctx
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			// mcp-go answers it as it would have.
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
			return ctx
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		book := s.cancelBooks.Book(session.SessionID())
		book.Observe(bytes.TrimSpace(body))
		return cancels.With(ctx, book)
	}
}

// installEarlyCancels hands a call the cancellation that a Book (see
// package cancels) kept while it waited to start: the hook runs once
// mcp-go has registered the call's cancel function, so the notification
// handed to mcp-go now cancels it. srv is the server, made after hooks.
func installEarlyCancels(hooks *mcpserver.Hooks, srv func() *mcpserver.MCPServer) {
	hooks.AddBeforeCallTool(func(ctx context.Context, id any, _ *mcp.CallToolRequest) {
		if b := cancels.From(ctx); b != nil && b.Start(cancels.Key(id)) {
			srv().HandleMessage(ctx, cancels.Notification(id))
		}
	})
	hooks.AddOnError(func(ctx context.Context, id any, method mcp.MCPMethod, _ any, _ error) {
		if b := cancels.From(ctx); b != nil && method == mcp.MethodToolsCall {
			b.Start(cancels.Key(id)) // answered without starting: forget it
		}
	})
}

// stdioContext is the context of a request over stdio: its peer and its
// principal, the registry's one.
func (s *Server) stdioContext(ctx context.Context) context.Context {
	return principals.WithPrincipal(context.WithValue(ctx, peerKey{}, peer{transport: TransportStdio}), s.principal(ctx))
}

// mcpCORS is what the scripts of a listed origin may do with the MCP
// transports: send the headers of the SDKs' clients and read the session id.
var mcpCORS = &httpserve.CORS{
	Methods: []string{http.MethodGet, http.MethodPost, http.MethodDelete},
	Headers: []string{"Authorization", "Content-Type", "Accept", "Last-Event-ID", "Mcp-Session-Id", "Mcp-Protocol-Version"},
	Expose:  []string{"Mcp-Session-Id", "Mcp-Protocol-Version", "WWW-Authenticate"},
}

// HTTPHandler returns the handler of the sse or http transport, with
// authentication, request size limits and the rule for browsers
// (httpserve.Protect: Host on loopback, Origin, no CORS but for
// Options.AllowedOrigins; MCP messages only as application/json).
func (s *Server) HTTPHandler(transport Transport, baseURL string) (http.Handler, func(context.Context) error, error) {
	withPeer := func(ctx context.Context, r *http.Request) context.Context {
		return context.WithValue(ctx, peerKey{}, peer{transport: transport, remote: r.RemoteAddr})
	}
	mux := http.NewServeMux()
	var (
		shutdown func(context.Context) error
		sse      func(session string, resp json.RawMessage) error
	)
	switch transport {
	case TransportHTTP:
		h := mcpserver.NewStreamableHTTPServer(s.mcp,
			mcpserver.WithEndpointPath("/mcp"),
			mcpserver.WithStreamableHTTPLogger(s.log),
			mcpserver.WithHeartbeatInterval(15*time.Second),
			mcpserver.WithHTTPContextFunc(withPeer),
			// httpserve.Protect, around everything, checks Host with the
			// same rule, the listen address on every interface allowed.
			mcpserver.WithDisableLocalhostProtection(true),
			mcpserver.WithSessionIdManagerResolver(s.sessionIDs),
		)
		var mcpHandler http.Handler = notificationMeta(h)
		if s.tasks != nil {
			mcpHandler = s.taskExtension(mcpHandler)
		}
		mux.Handle("/mcp", s.bindStreamableSessions(mcpHandler))
		shutdown = h.Shutdown
	case TransportSSE:
		h := mcpserver.NewSSEServer(s.mcp,
			mcpserver.WithBaseURL(baseURL),
			mcpserver.WithKeepAlive(true),
			mcpserver.WithKeepAliveInterval(15*time.Second),
			mcpserver.WithSSEContextFunc(s.sseContext(withPeer)),
			mcpserver.WithSSEDisableLocalhostProtection(true), // as above
			mcpserver.WithSessionIDGenerator(s.sseSessionID),
		)
		mux.Handle("/sse", h.SSEHandler())
		mux.Handle("/message", s.bindSSESessions(h.MessageHandler()))
		shutdown = h.Shutdown
		sse = func(session string, resp json.RawMessage) error { return h.SendEventToSession(session, resp) }
	default:
		return nil, nil, fmt.Errorf("transport %q is not served over HTTP", transport)
	}
	// JSON escaping can double text; base64 adds a third to files.
	maxBody := s.opts.MaxCode + s.opts.MaxStdin*2 + s.opts.Files.MaxTotalBytes*2 + 1<<20
	var h http.Handler = limitBody(s.countRequests(s.opts.Replicas.Forward(s.refuseWhileDraining(rejectInvalidUTF8(mux, sse, s.log)), s.route)), maxBody)
	h = s.authenticate(httpserve.RequireJSON(h))
	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	root.Handle("/", h)
	if s.opts.Replicas != nil && s.gate != nil {
		// The peers' calls for approvals, with the peer token instead of
		// a principal's.
		api := peerAPI(s.opts.Replicas, s.gate, s.log)
		root.Handle(peerApprovalsPath, api)
		root.Handle(peerApprovalsPath+"/", api)
	}
	// Outside the token check: a CORS preflight never carries one.
	return httpserve.Protect(root, httpserve.Policy{AllowedOrigins: s.opts.AllowedOrigins, CORS: mcpCORS, Log: s.log}), shutdown, nil
}

// ServeHTTP listens on addr and serves the sse or http transport until ctx
// is cancelled, then shuts down. ready, if not nil, receives the bound
// address once listening.
func (s *Server) ServeHTTP(ctx context.Context, transport Transport, addr string, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	base := "http://" + ln.Addr().String()
	handler, shutdownMCP, err := s.HTTPHandler(transport, base)
	if err != nil {
		ln.Close()
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	return httpserve.Serve(ctx, ln, handler, 5*time.Second, shutdownMCP)
}

// limitBody rejects request bodies over max bytes with 413.
func limitBody(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			http.Error(w, fmt.Sprintf("413 request too large: %d bytes, the limit is %d (CODE_EXEC_MAX_CODE and CODE_EXEC_MAX_STDIN)", r.ContentLength, max), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}
