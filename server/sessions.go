package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sessions"
	"github.com/codeexec/codeexec/server/principals"
)

// The session tools: session_create, session_close and session_list, and
// code_execute's session_id. They are offered when Options.Sessions is set.

// Tool names of the sessions.
const (
	ToolSessionCreate = "session_create"
	ToolSessionClose  = "session_close"
	ToolSessionList   = "session_list"
)

// owner is the key that what a client makes belongs to (its sessions, its
// tasks, its runs' artifacts): the client's MCP session id where there is
// one, which only its principal can use (see principals.go); otherwise
// (protocol 2026-07-28 has no sessions) its principal, all of whose
// clients without a session are one owner. Whatever another owner made is
// answered as if it did not exist.
func (s *Server) owner(ctx context.Context) string {
	if sess := mcpserver.ClientSessionFromContext(ctx); sess != nil && sess.SessionID() != "" {
		return ownerOfSession(sess.SessionID())
	}
	return s.principal(ctx).Key()
}

func ownerOfSession(id string) string { return "mcp:" + id }

// SessionCreateArgs are the decoded arguments of session_create.
type SessionCreateArgs struct {
	Language    string
	IdleTimeout time.Duration
	// Packages are checked and normalized (packages.Parse).
	Packages []string
}

// sessionCreateArgs declares session_create's arguments.
func sessionCreateArgs(a *SessionCreateArgs, o *Options) argList {
	return argList{tool: ToolSessionCreate, example: `{"language": "python"}`, params: []param{
		stringParam("language", "Language of every call in the session: python (the default), javascript or bash. python and javascript keep their variables between calls; bash keeps files only.", false, func(lang string) error {
			canon, err := sandbox.CanonicalLanguage(lang)
			if err != nil || !slices.Contains(o.Languages, canon) {
				return argErr("language %q is not supported here: use one of %s", truncateRunes(lang, 40), strings.Join(o.Languages, ", "))
			}
			a.Language = canon
			return nil
		}),
		numberParam("idle_timeout_seconds", "End the session after this many seconds without a call (optional; at most the server's idle timeout, which applies otherwise: see sandbox_info).",
			"a number of seconds", 0, func(secs float64) error {
				maxSecs := o.SessionIdleTimeout.Seconds()
				switch {
				case math.IsNaN(secs) || secs < 1:
					return argErr("idle_timeout_seconds must be at least 1 (at most %s)", fmtSeconds(maxSecs))
				case secs > maxSecs:
					return argErr("idle_timeout_seconds %s is above this server's cap of %s seconds (CODE_EXEC_SESSION_IDLE_TIMEOUT): ask for at most %s", fmtSeconds(secs), fmtSeconds(maxSecs), fmtSeconds(maxSecs))
				}
				a.IdleTimeout = time.Duration(secs * float64(time.Second))
				return nil
			}),
		packagesParam(o, &a.Language, func(specs []string) { a.Packages = specs }),
	}}
}

// sessionIDParam declares a session_id argument stored in id.
func sessionIDParam(description string, required bool, id *string) param {
	return stringParam("session_id", description, required, func(v string) error {
		v = strings.TrimSpace(v)
		if v == "" || len(v) > 100 {
			return argErr("session_id %q is not a session id: use the session_id that session_create returned", truncateRunes(v, 40))
		}
		*id = v
		return nil
	})
}

// sessionCloseArgs declares session_close's arguments.
func sessionCloseArgs(id *string) argList {
	return argList{tool: ToolSessionClose, example: `{"session_id": "ses_..."}`, params: []param{
		sessionIDParam("The session to end, as session_create returned it.", true, id),
	}}
}

// sessionListArgs declares session_list's arguments: none.
var sessionListArgs = argList{tool: ToolSessionList}

// SessionOutput describes one session in the tools' structuredContent.
type SessionOutput struct {
	SessionID string `json:"session_id" jsonschema:"Pass it to code_execute to run code in the session."`
	Language  string `json:"language"`
	// KeepsVariables says whether variables persist (python, javascript)
	// or only files (bash).
	KeepsVariables     bool    `json:"keeps_variables" jsonschema:"Variables persist between calls (python, javascript); otherwise only files do (bash)."`
	Calls              int     `json:"calls" schema:"optional"`
	Busy               bool    `json:"busy" schema:"optional"`
	AgeSeconds         float64 `json:"age_seconds" schema:"optional"`
	IdleSeconds        float64 `json:"idle_seconds" schema:"optional"`
	IdleTimeoutSeconds float64 `json:"idle_timeout_seconds"`
	// ExpiresInSeconds is how long the session has left if no call comes.
	ExpiresInSeconds float64 `json:"expires_in_seconds" jsonschema:"The session ends after this long without a call."`
	// Packages are the packages installed for the session at its creation.
	Packages []string `json:"packages,omitempty" jsonschema:"The packages installed for the session when it was created."`
}

func sessionOutput(i sessions.Info, now time.Time) SessionOutput {
	round := func(d time.Duration) float64 { return math.Round(d.Seconds()*10) / 10 }
	return SessionOutput{
		SessionID: i.ID, Language: i.Language, KeepsVariables: sessions.Interpreted(i.Language),
		Calls: i.Calls, Busy: i.Busy,
		AgeSeconds: round(now.Sub(i.Created)), IdleSeconds: round(now.Sub(i.LastUsed)),
		IdleTimeoutSeconds: round(i.IdleTimeout), ExpiresInSeconds: round(max(0, i.Expires.Sub(now))),
		Packages: i.Packages,
	}
}

// SessionListOutput is session_list's structuredContent.
type SessionListOutput struct {
	Sessions    []SessionOutput `json:"sessions"`
	MaxSessions int             `json:"max_sessions" jsonschema:"Sessions that may exist at once, all clients together."`
}

// SessionCloseOutput is session_close's structuredContent.
type SessionCloseOutput struct {
	SessionID string `json:"session_id"`
	Closed    bool   `json:"closed"`
}

func sessionTools(o *Options) []mcp.Tool {
	maxN, idle, life := o.Sessions.Limits()
	return []mcp.Tool{
		{
			Name:  ToolSessionCreate,
			Title: "Create a session",
			Description: fmt.Sprintf("Start a session: a sandbox that lives across code_execute calls that pass its session_id. "+
				"Its working directory persists and, for python and javascript, so do the variables, as in a notebook; bash keeps files only. "+
				"A call that times out or hits a limit restarts the interpreter (state lost, files kept). "+
				"Sessions end after %s without a call, %s after they start, or with session_close; at most %d exist at once.",
				idle, life, maxN),
			RawInputSchema:  argSchema(sessionCreateArgs(&SessionCreateArgs{}, o)),
			RawOutputSchema: outputSchema[SessionOutput](),
			Annotations: mcp.ToolAnnotation{
				Title: "Create a session", ReadOnlyHint: mcp.ToBoolPtr(false), DestructiveHint: mcp.ToBoolPtr(false),
				IdempotentHint: mcp.ToBoolPtr(false), OpenWorldHint: mcp.ToBoolPtr(false),
			},
		},
		{
			Name:            ToolSessionClose,
			Title:           "Close a session",
			Description:     "End a session: its processes stop and its files and container are removed.",
			RawInputSchema:  argSchema(sessionCloseArgs(new(string))),
			RawOutputSchema: outputSchema[SessionCloseOutput](),
			Annotations: mcp.ToolAnnotation{
				Title: "Close a session", ReadOnlyHint: mcp.ToBoolPtr(false), DestructiveHint: mcp.ToBoolPtr(true),
				IdempotentHint: mcp.ToBoolPtr(true), OpenWorldHint: mcp.ToBoolPtr(false),
			},
		},
		{
			Name:            ToolSessionList,
			Title:           "List your sessions",
			Description:     "List the sessions this client created and that are still open, with their age, idle time and when they expire.",
			RawInputSchema:  argSchema(sessionListArgs),
			RawOutputSchema: outputSchema[SessionListOutput](),
			Annotations: mcp.ToolAnnotation{
				Title: "List your sessions", ReadOnlyHint: mcp.ToBoolPtr(true), DestructiveHint: mcp.ToBoolPtr(false),
				IdempotentHint: mcp.ToBoolPtr(true), OpenWorldHint: mcp.ToBoolPtr(false),
			},
		},
	}
}

func (s *Server) handleSessionCreate(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	a := SessionCreateArgs{Language: "python"}
	if !slices.Contains(s.opts.Languages, "python") && len(s.opts.Languages) > 0 {
		a.Language = s.opts.Languages[0]
	}
	if err := decodeArgs(req.GetRawArguments(), sessionCreateArgs(&a, &s.opts)); err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	o := sessions.CreateOptions{Language: a.Language, Limits: s.principal(ctx).Limits(s.opts.Limits), IdleTimeout: a.IdleTimeout, Packages: a.Packages}
	info, err := s.createSession(ctx, req, o)
	switch {
	case isInputRequired(err):
		return inputRequest(err), nil
	case err != nil:
		if msg, ok := approvalErrorMessage(err); ok {
			return mcp.NewToolResultError(strings.Replace(msg, "The code did not run", "The session was not created", 1)), nil
		}
		return mcp.NewToolResultError(sessionErrorMessage(err)), nil
	}
	out := sessionOutput(info, time.Now())
	keeps := "its files and, between calls, its variables"
	if !out.KeepsVariables {
		keeps = "its files (each call is a fresh bash in the session's directory)"
	}
	text := fmt.Sprintf("Session %s (%s) is ready: pass session_id %q to code_execute. It keeps %s, and ends after %s without a call, or with session_close.",
		info.ID, info.Language, info.ID, keeps, info.IdleTimeout)
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}, StructuredContent: out}, nil
}

// createSession creates a session for the caller. One with packages is a
// request like a run's, with no code (sandbox.Request.NewSession): it goes
// through the runner chain, so that it waits for a person where the policy
// says so (always: the risk check finds nothing in empty code) and is
// recorded in the audit log; its packages are installed and the session
// starts, in the session router, only once it is allowed. One without
// packages starts nothing before its first call and is not a request.
func (s *Server) createSession(ctx context.Context, call mcp.CallToolRequest, o sessions.CreateOptions) (sessions.Info, error) {
	owner := s.owner(ctx)
	if len(o.Packages) == 0 {
		// Not a request of the runner chain: the principal's policy is
		// held to here, as its principals.Guard would.
		p := s.principal(ctx)
		req := sandbox.Request{Language: o.Language, Limits: o.Limits, NewSession: &sandbox.NewSession{}}
		if err := p.Check(req); err != nil {
			return sessions.Info{}, err
		}
		req = p.Narrow(req)
		o.Network, o.Quota = req.Network, req.NewSession.Quota
		return s.opts.Sessions.Create(ctx, owner, o)
	}
	req := sandbox.Request{Language: o.Language, Packages: o.Packages, Limits: o.Limits, NewSession: &sandbox.NewSession{IdleTimeout: o.IdleTimeout}}
	res, err := s.runner.Run(s.callContext(ctx, call), req)
	if err != nil {
		return sessions.Info{}, err
	}
	return s.opts.Sessions.Check(owner, res.Session)
}

func (s *Server) handleSessionClose(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var id string
	if err := decodeArgs(req.GetRawArguments(), sessionCloseArgs(&id)); err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	if err := s.opts.Sessions.Close(s.owner(ctx), id); err != nil {
		return mcp.NewToolResultError(sessionErrorMessage(err)), nil
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent("Session " + id + " is closed: its processes stopped and its files are removed.")},
		StructuredContent: SessionCloseOutput{SessionID: id, Closed: true},
	}, nil
}

func (s *Server) handleSessionList(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if err := decodeArgs(req.GetRawArguments(), sessionListArgs); err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	now := time.Now()
	maxN, _, _ := s.opts.Sessions.Limits()
	out := SessionListOutput{Sessions: []SessionOutput{}, MaxSessions: maxN}
	var b strings.Builder
	for _, i := range s.opts.Sessions.List(s.owner(ctx)) {
		o := sessionOutput(i, now)
		out.Sessions = append(out.Sessions, o)
		fmt.Fprintf(&b, "%s (%s): %d calls, age %ss, idle %ss, ends in %ss without a call\n", o.SessionID, o.Language, o.Calls, fmtSeconds(o.AgeSeconds), fmtSeconds(o.IdleSeconds), fmtSeconds(o.ExpiresInSeconds))
	}
	if len(out.Sessions) == 0 {
		b.WriteString("You have no open session. Start one with session_create.\n")
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(b.String())}, StructuredContent: out}, nil
}

// sessionErrorMessage turns a Manager error into one sentence for the model.
func sessionErrorMessage(err error) string {
	if msg, ok := packagesErrorMessage(err); ok {
		return strings.Replace(msg, "so the code did not run", "so the session was not created", 1)
	}
	switch {
	case errors.Is(err, principals.ErrRefused):
		return err.Error()
	case errors.Is(err, sessions.ErrUnknownSession):
		return capitalize(err.Error()) + ". Start a new one with session_create (session_list shows yours)."
	case errors.Is(err, sessions.ErrTooManySessions):
		return capitalize(err.Error()) + ". Close a session you no longer need with session_close, or wait for an idle one to expire."
	case errors.Is(err, sessions.ErrWrongLanguage):
		return capitalize(err.Error()) + ". Use the session's language, or create a session for this one."
	case errors.Is(err, sandbox.ErrClosed):
		return "The server is shutting down and no longer starts sessions."
	case errors.Is(err, sandbox.ErrUnknownLanguage), errors.Is(err, sandbox.ErrLanguageUnavailable):
		return capitalize(err.Error()) + "."
	case errors.Is(err, sandbox.ErrSandboxUnavailable):
		return fmt.Sprintf("The session could not be started (%s); this is a server-side problem, so retrying later or telling the operator may help.", sandboxDetail(err))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "The request was cancelled before the session was ready."
	}
	return fmt.Sprintf("The session could not be used: %v.", err)
}
