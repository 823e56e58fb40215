package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/approvals/audit"
	"github.com/codeexec/codeexec/sandbox"
)

// approvalInputID is the key of the elicitation in the input requests.
const approvalInputID = "approval"

// callContext is ctx with who asks, for the runner chain: the client whose
// run slots and sessions these are (sandbox.WithCaller: a task's run leaves
// a slot to the calls that clients wait on, see sandbox.Limit), and the
// requester (approvals.WithCall) with, where there is an approval gate, how
// to ask the person behind the client and the answer the call brings
// back, if any.
func (s *Server) callContext(ctx context.Context, call mcp.CallToolRequest) context.Context {
	ctx = sandbox.WithCaller(ctx, sandbox.Caller{Client: s.owner(ctx), Background: inTask(ctx)})
	// Its principal is in ctx already (the transport put it there), for
	// the chain's principals.Guard and run token, the metrics and the
	// audit record; its approval policy is the Gate's for this call.
	c := approvals.Call{Requester: s.requester(ctx), Policy: s.principal(ctx).Policy.Approval}
	if s.gate == nil {
		return approvals.WithCall(ctx, c)
	}
	by := "the user of " + clientName(c.Requester)
	if rt := call.Params.MultiRoundTripParams; rt.RequestState != "" || len(rt.InputResponses) > 0 {
		// A retry that carries an answer: the Gate checks that its state
		// was signed for exactly these arguments, once, in time.
		_ = rt.InputResponses.DecodeFor(mcp.InputRequests{approvalInputID: mcp.NewElicitationInputRequest(mcp.ElicitationParams{})})
		c.Answer = &approvals.Answer{State: rt.RequestState, Decision: elicitationDecision(mcpserver.ElicitationResponse(rt.InputResponses, approvalInputID), by)}
		return approvals.WithCall(ctx, c)
	}
	switch {
	case !s.opts.Elicit || !clientCanElicit(ctx):
		// Only the console and the CLI can answer.
		c.Waiting = s.progressReporter(ctx, call)
	case mcpserver.IsModernRequest(ctx):
		// Protocol 2026-07-28: the question goes back with the result.
		c.Approver = inputRequester{}
	default:
		// Before 2026-07-28 the server asks the client itself
		// (elicitation/create) while the console can answer too.
		c.Approver = elicitationRequest{s: s, by: by}
		c.Waiting = s.progressReporter(ctx, call)
	}
	return approvals.WithCall(ctx, c)
}

// inputRequester hands the question to the client: the result of the call
// asks for the input (a multi-round-trip input request), and the answer
// comes back with the next call.
type inputRequester struct{}

func (inputRequester) Approve(context.Context, approvals.Ask) (approvals.Decision, error) {
	return approvals.Decision{}, approvals.ErrInputRequired
}

// isInputRequired reports whether a Gate handed the question of err's call
// to the client (protocol 2026-07-28).
func isInputRequired(err error) bool {
	var input *approvals.InputRequiredError
	return errors.As(err, &input)
}

// inputRequest is the result of a call whose approval was handed to the
// client (isInputRequired): the client asks the person and calls again
// with the answer and the state.
func inputRequest(err error) *mcp.CallToolResult {
	var input *approvals.InputRequiredError
	errors.As(err, &input)
	return mcpserver.NewInputRequestBuilder(input.State).Elicit(approvalInputID, elicitation(input.Ask)).ToolResult()
}

// elicitationRequest asks the person behind the client with an
// elicitation/create request, and waits for the answer.
type elicitationRequest struct {
	s  *Server
	by string
}

func (e elicitationRequest) Approve(ctx context.Context, a approvals.Ask) (approvals.Decision, error) {
	res, err := e.s.mcp.RequestElicitation(ctx, mcp.ElicitationRequest{
		Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)},
		Params:  elicitation(a),
	})
	if err != nil {
		return approvals.Decision{}, fmt.Errorf("elicitation failed: %w", err)
	}
	return elicitationDecision(res, e.by), nil
}

// elicitationDecision reads the person's answer to the question.
func elicitationDecision(res *mcp.ElicitationResult, by string) approvals.Decision {
	d := approvals.Decision{By: by, Via: approvals.ViaElicitation}
	switch {
	case res == nil:
		d.Outcome, d.Note = approvals.OutcomeCancelled, "the client sent no answer"
	case res.Action == mcp.ElicitationResponseActionAccept && approved(res.Content):
		d.Outcome = approvals.OutcomeApproved
	case res.Action == mcp.ElicitationResponseActionAccept:
		d.Outcome, d.Note = approvals.OutcomeDenied, "approve was not checked"
	case res.Action == mcp.ElicitationResponseActionDecline:
		d.Outcome = approvals.OutcomeDenied
	default:
		d.Outcome = approvals.OutcomeCancelled
	}
	return d
}

// requester describes the client that sent a request, and its principal.
func (s *Server) requester(ctx context.Context) approvals.Requester {
	p := peerFrom(ctx)
	who := s.principal(ctx)
	r := approvals.Requester{Principal: who.Name, Org: who.Org, Transport: string(p.transport), Remote: p.remote}
	var ci *mcp.Implementation
	if info := mcpserver.RequestProtocolInfoFromContext(ctx); info != nil && info.ClientInfo != nil {
		ci = info.ClientInfo
	}
	if sess := mcpserver.ClientSessionFromContext(ctx); sess != nil {
		r.Session = sess.SessionID()
		if ws, ok := sess.(mcpserver.SessionWithClientInfo); ok && ci == nil {
			c := ws.GetClientInfo()
			ci = &c
		}
	}
	if ci != nil && ci.Name != "" {
		r.Client = strings.TrimSpace(ci.Name + " " + ci.Version)
	}
	return r
}

// clientCanElicit reports whether the client of this request declared the
// elicitation capability (per request in protocol 2026-07-28, per session before).
func clientCanElicit(ctx context.Context) bool {
	if info := mcpserver.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		return info.ClientCapabilities != nil && info.ClientCapabilities.Elicitation != nil
	}
	if sess, ok := mcpserver.ClientSessionFromContext(ctx).(mcpserver.SessionWithClientInfo); ok {
		return sess.GetClientCapabilities().Elicitation != nil
	}
	return false
}

func clientName(r approvals.Requester) string {
	if r.Client == "" {
		return "the MCP client"
	}
	return r.Client
}

// approved reads the "approve" field of an accepted elicitation.
func approved(content any) bool {
	m, ok := content.(map[string]any)
	if !ok {
		return false
	}
	v, ok := m["approve"].(bool)
	return ok && v
}

// elicitation is the question shown to the person: language, the full
// code, every file (the text of each textual one) and stdin, the reasons,
// and who asks, every hidden character escaped (approvals.Visible); or, for
// a session's creation, the session's language and packages.
func elicitation(a approvals.Ask) mcp.ElicitationParams {
	if a.Action == approvals.ActionSessionCreate {
		return sessionElicitation(a)
	}
	line := approvals.VisibleLine
	var b strings.Builder
	fmt.Fprintf(&b, "%s asks to run %s code (%d bytes", line(a.Requester.String()), line(a.Language), len(a.Code))
	if a.StdinBytes > 0 {
		fmt.Fprintf(&b, ", %d bytes of stdin", a.StdinBytes)
	}
	switch n := len(a.Files); n {
	case 0:
	case 1:
		b.WriteString(", 1 file")
	default:
		fmt.Fprintf(&b, ", %d files", n)
	}
	fmt.Fprintf(&b, ", request %s). Approve it only if you have read it and want it to run.\n\n", line(a.ID))
	if a.Workspace != "" {
		fmt.Fprintf(&b, "The code can see %s.\n\n", line(a.Workspace))
	}
	if len(a.Packages) > 0 {
		b.WriteString("Packages installed for it first (their code runs with the program's):\n")
		for _, p := range a.Packages {
			fmt.Fprintf(&b, "- %s\n", line(p))
		}
		b.WriteString("\n")
	}
	if len(a.Reasons) > 0 {
		b.WriteString("The risk check flagged:\n")
		for _, r := range a.Reasons {
			b.WriteString("- " + line(r) + "\n")
		}
		b.WriteString("\n")
	}
	fenced(&b, a.Language, a.Code)
	if len(a.Files) > 0 {
		b.WriteString("\nFiles written into its working directory first:\n")
		for _, f := range a.Files {
			fmt.Fprintf(&b, "- %s (%d bytes, sha256 %s)", line(f.Path), f.Size, f.SHA256[:16])
			if f.Binary {
				fmt.Fprintf(&b, ", binary, not shown: %s\n", line(f.Kind))
				continue
			}
			b.WriteString(":\n")
			fenced(&b, "", f.Text)
		}
	}
	if a.Stdin != "" {
		b.WriteString("\nIts standard input:\n")
		fenced(&b, "", a.Stdin)
	}
	fmt.Fprintf(&b, "\nSHA-256 of the request: %s. Unanswered by %s, it is denied.", a.CodeSHA256, a.Deadline.Format(time.RFC3339))
	return approvalQuestion(b.String(), "Run this code", "Check to let this exact code run once.")
}

// sessionElicitation asks to create a session with packages.
func sessionElicitation(a approvals.Ask) mcp.ElicitationParams {
	line := approvals.VisibleLine
	var b strings.Builder
	fmt.Fprintf(&b, "%s asks to create a %s session with packages (request %s). No code runs now; the code of every call in the session "+
		"is approved on its own, and the packages' code runs when such code imports them.\n\nPackages installed for the session:\n", line(a.Requester.String()), line(a.Language), line(a.ID))
	for _, p := range a.Packages {
		fmt.Fprintf(&b, "- %s\n", line(p))
	}
	if a.Workspace != "" {
		fmt.Fprintf(&b, "\nThe session's code can see %s.\n", line(a.Workspace))
	}
	fmt.Fprintf(&b, "\nSHA-256 of the request: %s. Unanswered by %s, it is denied.", a.CodeSHA256, a.Deadline.Format(time.RFC3339))
	return approvalQuestion(b.String(), "Create this session", "Check to let this session be created once, with these packages.")
}

// approvalQuestion is an elicitation whose answer is one boolean,
// "approve", with the given title and description.
func approvalQuestion(message, title, description string) mcp.ElicitationParams {
	return mcp.ElicitationParams{
		Message: message,
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{
					"type":        "boolean",
					"title":       title,
					"description": description,
				},
			},
			"required": []string{"approve"},
		},
	}
}

// fenced writes text as a fenced block (of language info) that no line of
// text can close, every hidden character escaped.
func fenced(b *strings.Builder, info, text string) {
	text = approvals.Visible(strings.TrimRight(text, "\n"))
	fence := "```"
	for strings.Contains(text, fence) {
		fence += "`"
	}
	fmt.Fprintf(b, "%s%s\n%s\n%s\n", fence, info, text, fence)
}

// progressReporter returns the WaitFunc that keeps the client's call alive
// with progress notifications while a person is asked (when the client
// sent a progress token).
func (s *Server) progressReporter(ctx context.Context, call mcp.CallToolRequest) approvals.WaitFunc {
	var token mcp.ProgressToken
	if call.Params.Meta != nil {
		token = call.Params.Meta.ProgressToken
	}
	where := "the approvals console"
	if u := s.opts.ConsoleURL; u != "" {
		where += " at " + u
	}
	n := 0
	clock := clockFrom(ctx)
	return func(a approvals.Ask, waited, left time.Duration) {
		n++
		msg := fmt.Sprintf("Waiting for a person to approve request %s on %s or with `codeexec approvals approve %s`; it is denied in %s without an answer.",
			a.ID, where, a.ID, left.Round(time.Second))
		if n == 1 {
			s.log.Info("waiting for approval", "id", a.ID, "where", where)
		}
		if token == nil {
			return
		}
		_ = s.mcp.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": token,
			"progress":      clock.advance(waited.Seconds()),
			"total":         (waited + left).Seconds(),
			"message":       msg,
		})
	}
}

// approvalErrorMessage is the one sentence for an error of the approval step.
func approvalErrorMessage(err error) (string, bool) {
	var denied *approvals.DeniedError
	switch {
	case errors.As(err, &denied):
		return denied.Sentence(), true
	case errors.Is(err, audit.ErrWrite):
		return "The request was stopped because the audit log (CODE_EXEC_AUDIT_LOG) could not be written; this is a server-side problem, so tell the operator.", true
	}
	return "", false
}

// WhoCanApprove says, in one sentence fragment, who can approve a run in
// this configuration (for sandbox_info and the start-up log).
func (s *Server) WhoCanApprove() string {
	var who []string
	if s.opts.Elicit {
		who = append(who, "the person behind the MCP client, asked through it (MCP elicitation) when it supports it")
	}
	if s.opts.ConsoleURL != "" {
		who = append(who, "operators on the approvals console at "+s.opts.ConsoleURL+" and with `codeexec approvals`")
	}
	var b strings.Builder
	switch len(who) {
	case 0:
		b.WriteString("who can approve: nobody (no elicitation, no console), so such runs are denied")
	case 1:
		b.WriteString("who can approve: only " + who[0])
	default:
		b.WriteString("who can approve: " + strings.Join(who, ", and "))
	}
	switch {
	case s.opts.Elicit && s.opts.ElicitReason != "":
		b.WriteString(" (elicitation answers count: " + s.opts.ElicitReason + ")")
	case !s.opts.Elicit:
		b.WriteString("; answers through the MCP client (elicitation) do not count")
		if s.opts.ElicitReason != "" {
			b.WriteString(": " + s.opts.ElicitReason)
		}
	}
	return b.String()
}

// approvalDescription describes the approval policy of a caller (its
// principal's, policy) for sandbox_info.
func (s *Server) approvalDescription(policy approvals.Policy) string {
	g := s.gate
	if g == nil || policy == approvals.PolicyNever {
		return "never: code runs without asking a person (CODE_EXEC_APPROVAL is not configured)"
	}
	var b strings.Builder
	switch policy {
	case approvals.PolicyAlways:
		b.WriteString("always: every run waits for a person's approval")
	case approvals.PolicyRisky:
		b.WriteString("risky: runs that the risk check flags (network, subprocesses, deleting or overwriting files, privileges, environment variables or credentials, dynamic code, hidden or disguised text, in the code, its files or stdin, and files that hold code that cannot be shown) wait for a person's approval")
	}
	fmt.Fprintf(&b, "; no answer within %s means denied", g.Timeout())
	b.WriteString("; " + s.WhoCanApprove())
	if s.opts.AuditLog != "" {
		b.WriteString("; every request, decision and run is recorded in the audit log")
	}
	return b.String()
}
