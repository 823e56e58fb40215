// Package server wires codeexec's tools to MCP: the tool declarations and
// handlers, the stdio, SSE and streamable HTTP transports with the
// bearer-token authentication of the HTTP ones, the asking of a person
// through the client (MCP elicitation) when runs need approval, and the
// approvals console and its API.
//
// The server knows nothing of the configuration nor of the sandbox modes:
// it is given the runner chain that cmd/codeexec builds, once, and Options
// with what it needs besides, among them the few parts of the chain that
// it calls directly (the approval gate, the sessions). Each call's request
// goes through the chain; who asks and how to ask them travel in its
// context (sandbox.WithCaller, approvals.WithCall).
package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sessions"
	"github.com/codeexec/codeexec/server/cancels"
	"github.com/codeexec/codeexec/server/httpserve"
	"github.com/codeexec/codeexec/server/principals"
	"github.com/codeexec/codeexec/server/replicas"
	"github.com/codeexec/codeexec/server/tasks"
)

// instructions are the server's instructions to the model.
func instructions(o Options) string {
	s := "codeexec runs short python, javascript (Node.js) and bash programs in a sandbox and returns stdout, stderr and the exit code. "
	if o.Sessions != nil {
		s += "Each call starts from a clean slate, unless it passes the session_id of a session (session_create), where files and variables persist between calls. "
	} else {
		s += "Each call starts from a clean slate. "
	}
	if o.Packages != nil {
		s += "Packages named in code_execute's packages argument (pinned, such as \"requests==2.31.0\") are installed from the operator's index first and cached; the program itself has no network. "
	}
	return s + "Print what you need to see. Files sent in code_execute's files argument are in the working directory; files the program writes there come back (charts as images, others as resources). " +
		"Call sandbox_info for the limits and the languages available."
}

// Name is the server name announced to MCP clients.
const Name = "codeexec"

// Server is codeexec's MCP server: tools over a Runner, served on one transport.
type Server struct {
	opts   Options
	runner sandbox.Runner
	// gate is Options.Approvals (nil without one).
	gate Gate
	log  *slog.Logger
	mcp  *mcpserver.MCPServer
	mode sandbox.Mode
	// tasks holds the runs made MCP tasks (nil: tasks are off); links
	// ties mcp-go's 2025-11-25 tasks to them.
	tasks tasks.Store
	links legacyLinks

	// principals are Options.Principals (or the one made of AuthToken);
	// sessionIDs binds the HTTP transports' MCP session ids to them.
	principals *principals.Registry
	sessionIDs *sessionIDs
	// cancelBooks holds the SSE sessions' calls cancelled before they
	// started (see package cancels).
	cancelBooks cancels.Sessions

	mu   sync.Mutex
	runs map[string]map[*int]context.CancelFunc // session id -> cancel funcs of its runs

	// draining is set by Drain; requests counts the HTTP requests in
	// flight that are not streams (see WaitRequests).
	draining atomic.Bool
	requests httpserve.InFlight
}

// Options are what a Server needs to know besides its Runner.
type Options struct {
	// Version is announced to clients and in sandbox_info ("dev" if empty).
	Version string
	Logger  *slog.Logger

	// Languages are the canonical names of the languages that may run.
	Languages []string
	// Limits are the operator's limits of every run; Limits.Timeout is the
	// timeout of a request that asks for none.
	Limits sandbox.Limits
	// MaxTimeout is the most a request's timeout_seconds may ask for.
	MaxTimeout time.Duration
	// MaxCode and MaxStdin are the largest code and stdin accepted, in
	// bytes; with Files.MaxTotalBytes they also bound the body of an HTTP
	// request.
	MaxCode, MaxStdin int64
	// MaxConcurrency is how many runs the Runner lets happen at once (see
	// sandbox.Limit); sandbox_info reports it.
	MaxConcurrency int

	// Files caps code_execute's files argument (CODE_EXEC_MAX_FILES,
	// CODE_EXEC_MAX_FILES_BYTES); MaxFiles 0 refuses it.
	Files artifacts.InputLimits
	// Artifacts caps what a run brings back from its working directory
	// (CODE_EXEC_MAX_ARTIFACTS, CODE_EXEC_MAX_ARTIFACT_BYTES); MaxArtifacts
	// 0 brings nothing back.
	Artifacts artifacts.Options
	// Store keeps the artifacts of recent runs, and the whole stdout and
	// stderr of those whose result shows only their head and tail, and
	// serves them to resources/read at codeexec://runs/<run id>/<path>;
	// nil keeps none (artifacts too large to embed are then only listed,
	// and the rest of a long output is gone).
	Store *artifacts.Store

	// Principals are who may call, each with its policy: over HTTP the
	// principal of a request is the one of its bearer token (a request
	// with no principal's token gets 401); over stdio, the registry's one
	// principal. Nil makes one from AuthToken: "default" with it, "local"
	// without, each with the server-wide settings of these Options.
	Principals *principals.Registry
	// AuthToken, if not empty and Principals is nil, is the bearer token
	// that clients of the HTTP transports must send.
	AuthToken string
	// AllowedOrigins are the web origins, besides the server's own, whose
	// pages may call the HTTP transports (CODE_EXEC_ALLOWED_ORIGINS, as
	// httpserve.ParseOrigin writes them); see httpserve.Protect.
	AllowedOrigins []string

	// Elicit asks through the client (MCP elicitation), when it supports
	// it, for runs that need a person's approval (with an approvals.Gate
	// as the Runner): the client's answer counts as a person's. Set it
	// only where a person stands behind the client, never where the
	// client is an agent that would approve its own code.
	Elicit bool
	// ElicitReason says why the client's answers count or not, for
	// sandbox_info.
	ElicitReason string
	// ConsoleURL is where people answer approval requests out of band
	// ("" without a console); it is shown to the client while a run waits.
	ConsoleURL string

	// Progress, if not nil, counts the progress notifications
	// (server/metrics).
	Progress Progress
	// Tasks, if not nil, lets clients run code_execute as an MCP task
	// (protocol 2025-11-25, and the 2026-07-28 extension
	// io.modelcontextprotocol/tasks over streamable HTTP and stdio). The
	// Server does not close it.
	Tasks tasks.Store
	// TaskMaxTimeout is the most a task's timeout_seconds may ask for
	// (MaxTimeout if smaller).
	TaskMaxTimeout time.Duration
	// TaskLifetime is how long a 2025-11-25 task is kept from its
	// creation, whatever ttl the client asks for: its longest run and its
	// result's keep time (the Store's own limits). Zero keeps the ttl the
	// client asks for.
	TaskLifetime time.Duration

	// Packages, if not nil, is the packages layer (CODE_EXEC_PACKAGES=true):
	// code_execute's and session_create's packages argument is accepted
	// and sandbox_info reports it. Nil refuses the argument with a clear
	// error.
	Packages Packages

	// Sessions, if not nil, offers the session tools (session_create,
	// session_close, session_list) and code_execute's session_id; the
	// runner chain must then route requests that name a session
	// (sessions.Router). The Server does not shut it down.
	Sessions Sessions
	// SessionIdleTimeout is the most a session_create may ask for as its
	// own idle timeout (the Manager's).
	SessionIdleTimeout time.Duration

	// Approvals, if not nil, is the approval gate of the runner chain: the
	// console answers its requests, sandbox_info describes its policy, and
	// each call's context tells it who asks and how to ask them.
	Approvals Gate
	// AuditLog is the audit log's path ("" without one), for sandbox_info.
	AuditLog string

	// Replicas, if not nil, is this replica and its peers behind the same
	// address: the ids the server issues carry the replica's id, and the
	// HTTP transports forward to its owner every request that names
	// another replica's (see server/replicas and routing.go). The tasks,
	// sessions and approvals given in these Options must issue ids with
	// the same prefix (Replicas.Prefix).
	Replicas *replicas.Set
}

// New builds the MCP server around runner, the runner chain that every
// call's request goes through (see cmd/codeexec): it should already
// enforce the concurrency limit (sandbox.Limit) and hold opts.Approvals
// and the session router of opts.Sessions, if any. The Server does not
// close it.
func New(runner sandbox.Runner, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.TaskMaxTimeout < opts.MaxTimeout {
		opts.TaskMaxTimeout = opts.MaxTimeout
	}
	s := &Server{opts: opts, runner: runner, gate: opts.Approvals, log: opts.Logger, runs: map[string]map[*int]context.CancelFunc{},
		mode: runner.Capabilities().Mode, tasks: opts.Tasks, principals: opts.Principals, sessionIDs: newSessionIDs(opts.Replicas.Prefix())}
	if s.principals == nil {
		s.principals = DefaultPrincipals(opts)
	}
	hooks := &mcpserver.Hooks{}
	var serverOpts []mcpserver.ServerOption
	if s.tasks != nil {
		th := &mcpserver.TaskHooks{}
		s.installTaskHooks(hooks, th)
		serverOpts = append(serverOpts,
			mcpserver.WithTaskCapabilities(true, true, true),
			mcpserver.WithTaskHooks(th),
			mcpserver.WithExtensions(map[string]any{TasksExtension: map[string]any{}}),
		)
	}
	installEarlyCancels(hooks, func() *mcpserver.MCPServer { return s.mcp })
	hooks.AddOnUnregisterSession(func(ctx context.Context, session mcpserver.ClientSession) {
		s.cancelSession(session.SessionID())
		s.cancelBooks.Forget(session.SessionID())
		if s.opts.Sessions != nil {
			// Nobody else can use the sessions of a client that went away.
			owner := ownerOfSession(session.SessionID())
			go func() {
				if n := s.opts.Sessions.CloseOwner(owner); n > 0 {
					s.log.Info("client session ended; closed its sessions", "session", session.SessionID(), "sessions", n)
				}
			}()
		}
		if s.gate != nil {
			s.gate.Broker().WithdrawSession(session.SessionID())
		}
	})
	s.mcp = mcpserver.NewMCPServer(Name, opts.Version, append([]mcpserver.ServerOption{
		mcpserver.WithToolCapabilities(false),
		mcpserver.WithRecovery(),
		mcpserver.WithHooks(hooks),
		mcpserver.WithInstructions(instructions(opts)),
	}, serverOpts...)...)
	s.mcp.AddTools(s.tools()...)
	if opts.Store != nil {
		s.mcp.AddResourceTemplate(artifactTemplate(), s.readArtifact)
	}
	return s
}

// DefaultPrincipals is the registry of a server without a principals file:
// over HTTP with o.AuthToken, the principal "default", which that token
// authenticates; otherwise "local", whom every request is. Each has the
// server-wide settings of o.
func DefaultPrincipals(o Options) *principals.Registry {
	d := principals.Defaults{
		Languages: o.Languages, Packages: o.Packages != nil, MaxTimeout: o.MaxTimeout,
		Memory: o.Limits.MemoryBytes, CPUs: o.Limits.CPUs, MaxConcurrency: o.MaxConcurrency, Approval: approvals.PolicyNever,
	}
	if o.Sessions != nil {
		d.MaxSessions, _, _ = o.Sessions.Limits()
	}
	if o.Approvals != nil {
		d.Approval = o.Approvals.Policy()
	}
	if o.AuthToken != "" {
		return principals.Token(principals.Builtin(principals.DefaultName, d), o.AuthToken, "CODE_EXEC_AUTH_TOKEN")
	}
	return principals.Anonymous(principals.Builtin(principals.LocalName, d))
}

// Gate is what the server calls of the approval gate of its runner chain
// (approvals.Gate) directly: the console lists and answers its Broker's
// requests, a client session that ends withdraws its own, and sandbox_info
// describes its policy and timeout.
type Gate interface {
	Broker() *approvals.Broker
	Policy() approvals.Policy
	Timeout() time.Duration
}

// Sessions is what the server calls of the session Manager
// (sessions.Manager) directly, for the session tools; owner is the
// caller's key (see Server.owner). Calls in a session go through the
// runner chain instead (sandbox.Request.Session).
type Sessions interface {
	Create(ctx context.Context, owner string, o sessions.CreateOptions) (sessions.Info, error)
	Check(owner, id string) (sessions.Info, error)
	Close(owner, id string) error
	CloseOwner(owner string) int
	List(owner string) []sessions.Info
	Limits() (maxSessions int, idle, lifetime time.Duration)
}

// Progress counts the progress notifications of live output
// (metrics.Metrics).
type Progress interface {
	ProgressSent(n int)
	ProgressDropped(n int)
}

var _ Sessions = (*sessions.Manager)(nil)

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
