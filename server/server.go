// Package server wires codeexec's tools to MCP: the tool declarations and
// handlers, the stdio, SSE and streamable HTTP transports, and the bearer-token
// authentication of the HTTP transports.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox"
)

// Name is the server name announced to MCP clients.
const Name = "codeexec"

// Server is codeexec's MCP server: tools over a Runner, served on one transport.
type Server struct {
	cfg      *configs.Config
	runner   sandbox.Runner
	log      *slog.Logger
	version  string
	approval string
	mcp      *mcpserver.MCPServer
	// approvals is nil unless approvals or the audit log are configured.
	approvals *Approvals

	mu   sync.Mutex
	runs map[string]map[*int]context.CancelFunc // session id -> cancel funcs of its runs
}

// Options are the parts of a Server that do not come from the configuration.
type Options struct {
	// Version is announced to clients and in sandbox_info.
	Version string
	// Approval describes the approval policy in sandbox_info.
	Approval string
	// Approvals, if not nil, asks people before code runs (see Approvals).
	Approvals *Approvals
	Logger    *slog.Logger
}

// New builds the MCP server around runner. runner should already enforce the
// concurrency limit (see sandbox.Limit); the Server does not close it.
func New(cfg *configs.Config, runner sandbox.Runner, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Approval == "" {
		opts.Approval = approvalDescription(opts.Approvals)
	}
	if opts.Approval == "" {
		opts.Approval = "never: code runs without asking a person (CODE_EXEC_APPROVAL is not configured)"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{cfg: cfg, runner: runner, log: opts.Logger, version: opts.Version, approval: opts.Approval, approvals: opts.Approvals, runs: map[string]map[*int]context.CancelFunc{}}
	hooks := &mcpserver.Hooks{}
	hooks.AddOnUnregisterSession(func(ctx context.Context, session mcpserver.ClientSession) {
		s.cancelSession(session.SessionID())
		if s.approvals != nil {
			s.approvals.Gate.Broker().WithdrawSession(session.SessionID())
		}
	})
	s.mcp = mcpserver.NewMCPServer(Name, opts.Version,
		mcpserver.WithToolCapabilities(false),
		mcpserver.WithRecovery(),
		mcpserver.WithHooks(hooks),
		mcpserver.WithInstructions("codeexec runs short python, javascript (Node.js) and bash programs in a sandbox and returns stdout, stderr and the exit code. "+
			"Each call starts from a clean slate. Print what you need to see. Call sandbox_info for the limits and the languages available."),
	)
	s.mcp.AddTools(s.tools()...)
	return s
}

// MCP returns the underlying mcp-go server (for in-process tests).
func (s *Server) MCP() *mcpserver.MCPServer { return s.mcp }

// trackRun derives the context of one run, which is cancelled when its
// client session goes away (an SSE client that disconnects, for example).
func (s *Server) trackRun(ctx context.Context) (context.Context, func()) {
	sess := mcpserver.ClientSessionFromContext(ctx)
	if sess == nil {
		return ctx, func() {}
	}
	id := sess.SessionID()
	ctx, cancel := context.WithCancel(ctx)
	key := new(int)
	s.mu.Lock()
	if s.runs[id] == nil {
		s.runs[id] = map[*int]context.CancelFunc{}
	}
	s.runs[id][key] = cancel
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		delete(s.runs[id], key)
		if len(s.runs[id]) == 0 {
			delete(s.runs, id)
		}
		s.mu.Unlock()
		cancel()
	}
}

// cancelSession cancels every run of a session that ended.
func (s *Server) cancelSession(id string) {
	s.mu.Lock()
	cancels := s.runs[id]
	delete(s.runs, id)
	s.mu.Unlock()
	if len(cancels) > 0 {
		s.log.Info("client session ended; stopping its runs", "session", id, "runs", len(cancels))
	}
	for _, c := range cancels {
		c()
	}
}

// ServeStdio serves MCP on in and out until ctx is cancelled or in ends.
func (s *Server) ServeStdio(ctx context.Context, in interface{ Read([]byte) (int, error) }, out interface{ Write([]byte) (int, error) }) error {
	// mcp-go runs tool calls on a worker pool (5 workers by default); size
	// it so that it never throttles below CODE_EXEC_MAX_CONCURRENCY: calls
	// beyond the concurrency limit wait, cancellable, in sandbox.Limit.
	const maxWorkers = 100
	if s.cfg.MaxConcurrency > maxWorkers-10 {
		s.log.Warn("the stdio transport serves at most 100 tool calls at once", "max_concurrency", s.cfg.MaxConcurrency)
	}
	stdio := mcpserver.NewStdioServer(s.mcp)
	mcpserver.WithWorkerPoolSize(maxWorkers)(stdio)
	mcpserver.WithQueueSize(10000)(stdio)
	stdio.SetErrorLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelWarn))
	err := stdio.Listen(ctx, in, out)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// HTTPHandler returns the handler of the sse or http transport, with
// authentication and request size limits.
func (s *Server) HTTPHandler(transport configs.Transport, baseURL string) (http.Handler, func(context.Context) error, error) {
	mux := http.NewServeMux()
	var shutdown func(context.Context) error
	switch transport {
	case configs.TransportHTTP:
		h := mcpserver.NewStreamableHTTPServer(s.mcp,
			mcpserver.WithEndpointPath("/mcp"),
			mcpserver.WithStreamableHTTPLogger(s.log),
			mcpserver.WithHeartbeatInterval(15*time.Second),
			mcpserver.WithHTTPContextFunc(withRemoteAddr),
		)
		mux.Handle("/mcp", modernNotifications(h))
		shutdown = h.Shutdown
	case configs.TransportSSE:
		h := mcpserver.NewSSEServer(s.mcp,
			mcpserver.WithBaseURL(baseURL),
			mcpserver.WithKeepAlive(true),
			mcpserver.WithKeepAliveInterval(15*time.Second),
			mcpserver.WithSSEContextFunc(withRemoteAddr),
		)
		mux.Handle("/sse", h.SSEHandler())
		mux.Handle("/message", h.MessageHandler())
		shutdown = h.Shutdown
	default:
		return nil, nil, fmt.Errorf("transport %q is not served over HTTP", transport)
	}
	maxBody := int64(s.cfg.MaxCode) + int64(s.cfg.MaxStdin)*2 + 1<<20
	var h http.Handler = limitBody(mux, maxBody)
	h = requireToken(h, s.cfg.AuthToken)
	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	root.Handle("/", h)
	return root, shutdown, nil
}

// ServeHTTP listens on addr and serves the sse or http transport until ctx
// is cancelled, then shuts down. ready, if not nil, receives the bound
// address once listening.
func (s *Server) ServeHTTP(ctx context.Context, transport configs.Transport, addr string, ready func(net.Addr)) error {
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
	return serveUntilDone(ctx, ln, handler, 5*time.Second, shutdownMCP)
}

// serveUntilDone serves handler on ln until ctx ends, then shuts down
// gracefully within grace (after beforeShutdown, if set), closing whatever
// is still open after that.
func serveUntilDone(ctx context.Context, ln net.Listener, handler http.Handler, grace time.Duration, beforeShutdown func(context.Context) error) error {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(ln) }()
	select {
	case err := <-errCh:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if beforeShutdown != nil {
		_ = beforeShutdown(sctx)
	}
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}

// requireToken rejects requests without "Authorization: Bearer <token>"
// with 401. The comparison is constant-time (over SHA-256 digests, so the
// token's length does not leak either). An empty token disables the check.
func requireToken(next http.Handler, token string) http.Handler {
	if token == "" {
		return next
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="codeexec"`)
			http.Error(w, "401 unauthorized: send Authorization: Bearer <CODE_EXEC_AUTH_TOKEN>", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
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
