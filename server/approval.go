package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
)

// Approvals connects the server's code_execute to an approvals.Gate: the
// gate must also be (or wrap) the Runner given to New.
type Approvals struct {
	Gate *approvals.Gate
	// Signer binds approvals that round-trip through the client.
	Signer *approvals.Signer
	// Elicit asks through the client (MCP elicitation) when it supports it.
	Elicit bool
	// ConsoleURL is where people answer out of band ("" without a console).
	ConsoleURL string
}

// approvalInputID is the key of the elicitation in the input requests.
const approvalInputID = "approval"

// requester describes the client that sent a request.
func (s *Server) requester(ctx context.Context) approvals.Requester {
	r := approvals.Requester{Transport: string(s.cfg.Transport)}
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
	if remote, ok := ctx.Value(remoteAddrKey{}).(string); ok {
		r.Remote = remote
	}
	return r
}

type remoteAddrKey struct{}

// withRemoteAddr keeps the HTTP peer's address for the approver to see.
func withRemoteAddr(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, remoteAddrKey{}, r.RemoteAddr)
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

// approve runs the approval step of code_execute. It returns the context to
// run with (carrying the decision, the requester and the progress reporter),
// or a result to return instead of running: a rejection, or (protocol
// 2026-07-28) the input request that asks the client for approval.
func (s *Server) approve(ctx context.Context, call mcp.CallToolRequest, req sandbox.Request) (context.Context, *mcp.CallToolResult) {
	a := s.approvals
	ctx = approvals.WithRequester(ctx, s.requester(ctx))
	ctx = approvals.WithWaitFunc(ctx, s.progressReporter(ctx, call))
	required, findings := a.Gate.Check(req)
	modern := mcpserver.IsModernRequest(ctx)
	rt := call.Params.MultiRoundTripParams
	answered := rt.RequestState != "" || len(rt.InputResponses) > 0

	if answered {
		// A retry that carries an answer: it must come with a state this
		// server signed for exactly these arguments, once, in time.
		d, err := s.redeem(ctx, req, rt)
		if err != nil {
			return ctx, s.approvalErrorResult(err)
		}
		return approvals.WithDecision(ctx, d), nil
	}
	if !required || !a.Elicit || !clientCanElicit(ctx) {
		// The Gate decides: no approval needed, or wait for the console.
		return ctx, nil
	}

	ask, err := a.Gate.Open(ctx, req, findings)
	if err != nil {
		return ctx, s.approvalErrorResult(err)
	}
	state := a.Signer.Issue(ask.ID, ask.CodeSHA256, ask.Deadline)
	params := s.elicitation(ask)
	if modern {
		return ctx, mcpserver.NewInputRequestBuilder(state).Elicit(approvalInputID, params).ToolResult()
	}

	// Before 2026-07-28 the server asks the client itself (elicitation/create)
	// and waits for whichever answers first: the client, the console, or
	// the timeout. The answer goes through the same signed-state check.
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		res, err := s.mcp.RequestElicitation(ectx, mcp.ElicitationRequest{
			Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)},
			Params:  params,
		})
		if ectx.Err() != nil {
			return // decided elsewhere, or the client left
		}
		if err != nil {
			s.log.Warn("elicitation failed; waiting for the console", "id", ask.ID, "err", err)
			if a.ConsoleURL == "" {
				_, _ = a.Gate.Decide(approvals.Decision{ID: ask.ID, Outcome: approvals.OutcomeUnavailable, By: "codeexec", Via: approvals.ViaServer, Note: "elicitation failed: " + err.Error()})
			}
			return
		}
		rt := mcp.MultiRoundTripParams{
			InputResponses: mcp.InputResponses{approvalInputID: mcp.NewElicitationInputResponse(*res)},
			RequestState:   state,
		}
		if _, err := s.redeem(ectx, req, rt); err != nil {
			s.log.Warn("elicitation answer rejected", "id", ask.ID, "err", err)
		}
	}()
	d, err := a.Gate.Wait(ctx, ask)
	if err != nil {
		return ctx, s.approvalErrorResult(err)
	}
	return approvals.WithDecision(ctx, d), nil
}

// redeem checks the state and answer of a retry and returns the decision
// that stands for the request (the first answer wins), or a *DeniedError.
func (s *Server) redeem(ctx context.Context, req sandbox.Request, rt mcp.MultiRoundTripParams) (approvals.Decision, error) {
	a := s.approvals
	hash := approvals.HashRequest(req)
	id, verdict := a.Signer.Redeem(rt.RequestState, hash)
	if verdict != approvals.OutcomeApproved {
		note := map[approvals.Outcome]string{
			approvals.OutcomeForged:   "the approval state was not issued by this server for these arguments",
			approvals.OutcomeReplayed: "the approval state was used before",
			approvals.OutcomeExpired:  "the approval state expired",
		}[verdict]
		if verdict == approvals.OutcomeForged && id != "" {
			id = "" // issued for other code: record this request on its own
		}
		return approvals.Decision{}, a.Gate.Reject(ctx, req, id, verdict, note)
	}
	_ = rt.InputResponses.DecodeFor(mcp.InputRequests{approvalInputID: mcp.NewElicitationInputRequest(mcp.ElicitationParams{})})
	res := mcpserver.ElicitationResponse(rt.InputResponses, approvalInputID)
	d := approvals.Decision{ID: id, By: "the user of " + clientName(s.requester(ctx)), Via: approvals.ViaElicitation}
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
	final, err := a.Gate.Decide(d)
	if errors.Is(err, approvals.ErrUnknownRequest) {
		return approvals.Decision{}, a.Gate.Reject(ctx, req, id, approvals.OutcomeExpired, "the request is no longer pending")
	}
	if err != nil {
		return approvals.Decision{}, err
	}
	if !final.Outcome.Allows() {
		return final, &approvals.DeniedError{Decision: final}
	}
	return final, nil
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
// code, the reasons, and who asks.
func (s *Server) elicitation(a approvals.Ask) mcp.ElicitationParams {
	var b strings.Builder
	fmt.Fprintf(&b, "%s asks to run %s code (%d bytes", a.Requester.String(), a.Language, len(a.Code))
	if a.StdinBytes > 0 {
		fmt.Fprintf(&b, ", %d bytes of stdin", a.StdinBytes)
	}
	fmt.Fprintf(&b, ", request %s). Approve it only if you have read it and want it to run.\n\n", a.ID)
	if len(a.Reasons) > 0 {
		b.WriteString("The risk check flagged:\n")
		for _, r := range a.Reasons {
			b.WriteString("- " + r + "\n")
		}
		b.WriteString("\n")
	}
	fence := "```"
	for strings.Contains(a.Code, fence) {
		fence += "`"
	}
	fmt.Fprintf(&b, "%s%s\n%s\n%s\n\nSHA-256 of the request: %s. Unanswered by %s, it is denied.",
		fence, a.Language, strings.TrimRight(a.Code, "\n"), fence, a.CodeSHA256, a.Deadline.Format(time.RFC3339))
	return mcp.ElicitationParams{
		Message: b.String(),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{
					"type":        "boolean",
					"title":       "Run this code",
					"description": "Check to let this exact code run once.",
				},
			},
			"required": []string{"approve"},
		},
	}
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
	if u := s.approvals.ConsoleURL; u != "" {
		where += " at " + u
	}
	n := 0
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
			"progress":      waited.Seconds(),
			"total":         (waited + left).Seconds(),
			"message":       msg,
		})
	}
}

// approvalErrorResult turns an approval error into a tool result.
func (s *Server) approvalErrorResult(err error) *mcp.CallToolResult {
	msg, ok := approvalErrorMessage(err)
	if !ok {
		msg = runErrorMessage(err, ExecuteArgs{})
	}
	return mcp.NewToolResultError(msg)
}

// approvalErrorMessage is the one sentence for an error of the approval step.
func approvalErrorMessage(err error) (string, bool) {
	var denied *approvals.DeniedError
	switch {
	case errors.As(err, &denied):
		return denied.Sentence(), true
	case errors.Is(err, approvals.ErrAudit):
		return "The request was stopped because the audit log (CODE_EXEC_AUDIT_LOG) could not be written; this is a server-side problem, so tell the operator.", true
	}
	return "", false
}

// approvalDescription describes the approval policy for sandbox_info.
func approvalDescription(a *Approvals) string {
	if a == nil || a.Gate.Policy() == approvals.PolicyNever {
		return ""
	}
	var b strings.Builder
	switch a.Gate.Policy() {
	case approvals.PolicyAlways:
		b.WriteString("always: every run waits for a person's approval")
	case approvals.PolicyRisky:
		b.WriteString("risky: runs that the risk check flags (network, subprocesses, deleting or overwriting files, privileges, environment variables or credentials, dynamic code) wait for a person's approval")
	}
	fmt.Fprintf(&b, "; no answer within %s means denied; asked ", a.Gate.Timeout())
	var where []string
	if a.Elicit {
		where = append(where, "through the client (MCP elicitation) when it supports it")
	}
	if a.ConsoleURL != "" {
		where = append(where, "on the approvals console at "+a.ConsoleURL+" and with `codeexec approvals`")
	}
	if len(where) == 0 {
		where = append(where, "nowhere (no elicitation, no console): such runs are denied")
	}
	b.WriteString(strings.Join(where, ", and "))
	if p := a.Gate.Audit().Path(); p != "" {
		b.WriteString("; every request, decision and run is recorded in the audit log")
	}
	return b.String()
}
