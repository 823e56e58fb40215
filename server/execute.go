package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
	"github.com/codeexec/codeexec/sandbox/sessions"
	"github.com/codeexec/codeexec/server/principals"
)

// ExecuteOutput is code_execute's structuredContent.
type ExecuteOutput struct {
	ExitCode int `json:"exit_code" jsonschema:"Exit status; 128+N when killed by signal N."`
	// Stdout and Stderr are the run's output, each shown whole up to
	// outputHead+outputTail bytes and otherwise as its head and tail with
	// a line between them (StdoutOmitted, StderrOmitted say what was left
	// out and where the whole is).
	Stdout        string          `json:"stdout" jsonschema:"What the program wrote to stdout; when it is long, its head and its tail with a line between them that says what was left out (see stdout_omitted)."`
	Stderr        string          `json:"stderr" jsonschema:"What the program wrote to stderr; when it is long, its head and its tail with a line between them that says what was left out (see stderr_omitted)."`
	StdoutOmitted *OutputOmission `json:"stdout_omitted,omitempty" jsonschema:"Present when stdout was too long to show whole: how much the stdout field leaves out, and the URI of the whole stdout."`
	StderrOmitted *OutputOmission `json:"stderr_omitted,omitempty" jsonschema:"Present when stderr was too long to show whole: how much the stderr field leaves out, and the URI of the whole stderr."`
	TimedOut      bool            `json:"timed_out" jsonschema:"The timeout stopped the run."`
	OOMKilled     bool            `json:"oom_killed" jsonschema:"The memory limit stopped the run."`
	Truncated     bool            `json:"truncated" jsonschema:"The output cap was reached and the run stopped."`
	DurationMS    float64         `json:"duration_ms" jsonschema:"Wall-clock duration of the run in milliseconds."`
	Sandbox       sandbox.Mode    `json:"sandbox" jsonschema:"The sandbox mode that ran the code."`
	Language      string          `json:"language" schema:"optional"`
	Signal        string          `json:"signal,omitempty" jsonschema:"The signal that ended the program, if any."`
	// Network is what the run reached and what was refused, under
	// CODE_EXEC_NETWORK=allowlist.
	Network   *egress.Report `json:"network,omitempty" jsonschema:"What the run reached and what was refused, when runs reach the network through codeexec's egress proxy (CODE_EXEC_NETWORK=allowlist)."`
	SessionID string         `json:"session_id,omitempty" jsonschema:"The session the code ran in, if any."`
	StateLost bool           `json:"state_lost,omitempty" jsonschema:"In a session: the call stopped the interpreter, so the variables of earlier calls are gone (the files stay)."`
	// Packages are the packages the run imported from, when it named some.
	Packages *sandbox.PackagesReport `json:"packages,omitempty" jsonschema:"The packages the run imported from (the packages argument): the normalized list, and whether it came from the cache or was installed for this call."`
	// Artifacts are the files the run created or changed, ArtifactsOmitted
	// those it left out, and ArtifactsNote says so in words.
	Artifacts        []ArtifactOutput     `json:"artifacts,omitempty" jsonschema:"Files the program created or changed in its working directory. Images also come as image content, small text files as embedded resources, others as resource links; resources/read serves each uri for a while."`
	ArtifactsOmitted []artifacts.Omission `json:"artifacts_omitted,omitempty" jsonschema:"Files that changed but were not brought back, and why (a cap, a symbolic link, a special file)."`
	ArtifactsNote    string               `json:"artifacts_note,omitempty" jsonschema:"What was left out of artifacts, in a sentence or two."`
}

// executeTool declares code_execute from the runner's capabilities: the
// hints follow the isolation it declares (code kept from the network is not
// open-world; code kept from the host's files is not destructive), and the
// description names only the languages that can run.
func executeTool(caps sandbox.Capabilities, o *Options) mcp.Tool {
	// Code that reaches allowed destinations through the egress proxy
	// reaches the world too.
	openWorld := !caps.Isolation.Network || caps.Egress != nil
	destructive := !caps.Isolation.Filesystem
	slate := "Each run starts from a clean slate: no state is kept between calls. "
	if o.Sessions != nil {
		slate = "Each run starts from a clean slate, unless session_id names a session (session_create), whose files and variables persist between calls. "
	}
	desc := "Run a short program and return its stdout, stderr and exit code. " +
		"Languages: " + languageList(caps.Languages) + ". " + slate +
		"Print results to stdout. Files given in the files argument are written into its working directory first, and files the program writes there come back (charts as images). " +
		"Limits (time, memory, output, files) apply; call sandbox_info to see them."
	if caps.Egress != nil {
		desc += " Network goes through codeexec's HTTP proxy (HTTP_PROXY/HTTPS_PROXY), which lets through only the destinations of sandbox_info's network_policy: " + egress.ProxyClients(nodeVersion(caps)) + "."
	}
	if o.Packages != nil {
		desc += " Packages named in the packages argument (pinned versions from the operator's index) are installed first and cached; the program itself keeps no network access."
	}
	return mcp.Tool{
		Name:            ToolExecute,
		Title:           "Execute code",
		Description:     desc,
		RawInputSchema:  argSchema(executeArgs(&ExecuteArgs{}, o)),
		RawOutputSchema: outputSchema[ExecuteOutput](),
		Annotations: mcp.ToolAnnotation{
			Title:           "Execute code",
			ReadOnlyHint:    mcp.ToBoolPtr(false),
			DestructiveHint: mcp.ToBoolPtr(destructive),
			IdempotentHint:  mcp.ToBoolPtr(false),
			OpenWorldHint:   mcp.ToBoolPtr(openWorld),
		},
	}
}

// nodeVersion is the version of the Node.js that runs javascript, or ""
// when javascript cannot run.
func nodeVersion(caps sandbox.Capabilities) string {
	if l, ok := caps.Language("javascript"); ok && l.Available {
		return l.Version
	}
	return ""
}

// toolLanguages orders the languages in code_execute's description, each
// with how a model should read its name.
var toolLanguages = []struct{ name, label string }{
	{"python", "python"},
	{"javascript", "javascript (Node.js)"},
	{"bash", "bash"},
}

// languageList names the languages that can run, in toolLanguages' order
// (any other after them, by name), or says that none can.
func languageList(langs []sandbox.LanguageStatus) string {
	avail := map[string]bool{}
	for _, l := range langs {
		if l.Available {
			avail[l.Name] = true
		}
	}
	var names []string
	for _, l := range toolLanguages {
		if avail[l.name] {
			names = append(names, l.label)
			delete(avail, l.name)
		}
	}
	rest := make([]string, 0, len(avail))
	for n := range avail {
		rest = append(rest, n)
	}
	sort.Strings(rest)
	names = append(names, rest...)
	if len(names) == 0 {
		return "none can run on this server now (sandbox_info says why)"
	}
	return strings.Join(names, ", ")
}

// executeTool declares code_execute; with tasks on, it may run as one.
func (s *Server) executeTool() mcp.Tool {
	t := executeTool(s.runner.Capabilities(), &s.opts)
	if s.tasks != nil {
		t.Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
	}
	return t
}

// handleExecute is code_execute's handler. Rejections and runs stopped by a
// limit are tool results with isError; a Go error is never returned for
// anything the model can fix.
func (s *Server) handleExecute(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if req.Params.Task != nil && s.tasks != nil {
		// Protocol 2025-11-25: mcp-go made a task of this call.
		return s.executeLegacyTask(ctx, req)
	}
	return s.execute(ctx, req), nil
}

// execute runs one call of code_execute, as a plain call or as the work of
// a task (see inTask): its arguments decoded, its request checked, run
// through the runner chain with its output live, and its result.
func (s *Server) execute(ctx context.Context, req mcp.CallToolRequest) *mcp.CallToolResult {
	args, refusal := s.executeArgs(ctx, req)
	if refusal != nil {
		return refusal
	}
	if !inTask(ctx) {
		// A task's run lives as long as the task, not the session.
		var done func()
		ctx, done = s.trackRun(ctx)
		defer done()
	}
	runReq, refusal := s.runRequest(ctx, args)
	if refusal != nil {
		return refusal
	}
	ctx, live := s.liveOutput(ctx, req)
	ctx = s.callContext(ctx, req)
	runReq.Observe = live.observe()
	res, err := s.runner.Run(ctx, runReq)
	live.close()
	if err != nil {
		return s.runFailed(ctx, err, args)
	}
	return s.runResult(ctx, args, res)
}

// executeArgs are the call's arguments, decoded (a task's were when the
// task was made), or the result that refuses them.
func (s *Server) executeArgs(ctx context.Context, req mcp.CallToolRequest) (ExecuteArgs, *mcp.CallToolResult) {
	if args, decoded := ctx.Value(decodedArgsKey{}).(ExecuteArgs); decoded {
		return args, nil
	}
	opts := s.callOptions(ctx)
	if inTask(ctx) {
		opts.MaxTimeout = opts.TaskMaxTimeout
	}
	args, err := DecodeExecuteArgs(req.GetRawArguments(), opts)
	if err != nil {
		s.logRejected(ctx, ToolExecute, err)
		return ExecuteArgs{}, mcp.NewToolResultError(err.Error())
	}
	return args, nil
}

// runRequest is the request of a call of code_execute with args, or the
// result that refuses it.
func (s *Server) runRequest(ctx context.Context, args ExecuteArgs) (sandbox.Request, *mcp.CallToolResult) {
	if args.SessionID != "" && len(args.Packages) > 0 {
		// A session's packages are installed when it starts.
		return sandbox.Request{}, mcp.NewToolResultError("packages cannot be sent with session_id: a session gets its packages when it is created (session_create's packages argument); create a session with the whole list, or run without session_id")
	}
	limits := s.principal(ctx).Limits(s.opts.Limits)
	limits.Timeout = args.Timeout
	req := sandbox.Request{
		Language: args.Language,
		Code:     args.Code,
		Stdin:    args.Stdin,
		Limits:   limits,
		Files:    args.Files,
		Packages: args.Packages,
		Session:  args.SessionID,
	}
	if s.opts.Artifacts.MaxArtifacts > 0 {
		o := s.opts.Artifacts
		req.Artifacts = &o
	}
	if req.Session != "" {
		// The session must be the caller's before anyone is asked to
		// approve code for it; the person approving the call sees the
		// packages the session installed when it started.
		info, err := s.opts.Sessions.Check(s.owner(ctx), req.Session)
		if err != nil {
			return sandbox.Request{}, mcp.NewToolResultError(sessionErrorMessage(err))
		}
		req.Packages = info.Packages
	}
	return req, nil
}

// runFailed is the result of a call whose request did not run to its end:
// the question went back to the client, or err says in one sentence why.
func (s *Server) runFailed(ctx context.Context, err error, args ExecuteArgs) *mcp.CallToolResult {
	switch {
	case errors.Is(err, principals.ErrRefused):
		// Over its principal's policy or limits: the sentence says what
		// and when to retry.
		s.logRejected(ctx, ToolExecute, err)
		return mcp.NewToolResultError(err.Error())
	case isInputRequired(err):
		return inputRequest(err)
	case args.SessionID != "" && isSessionError(err):
		return mcp.NewToolResultError(sessionErrorMessage(err))
	case errors.Is(err, artifacts.ErrInvalidFile):
		s.logRejected(ctx, ToolExecute, err)
		return mcp.NewToolResultError(filesErrorMessage(err))
	}
	_, isApproval := approvalErrorMessage(err)
	p := s.principal(ctx)
	switch {
	case errors.Is(err, pypolicy.ErrPolicy):
		s.log.Info("refused by the restricted Python policy", "language", args.Language, "principal", p.Name, "org", p.Org, "reason", err.Error())
	case errors.Is(err, packages.ErrInstall), errors.Is(err, packages.ErrTooLarge):
		s.log.Info("packages not installed", "language", args.Language, "principal", p.Name, "org", p.Org, "packages", args.Packages, "err", err)
	case !isApproval:
		s.log.Warn("run failed", "language", args.Language, "principal", p.Name, "org", p.Org, "err", err)
	}
	return mcp.NewToolResultError(runErrorMessage(err, args))
}

// runResult is the result of a run: its structured output, the text a
// model reads and the artifacts as content; isError when a limit stopped it.
func (s *Server) runResult(ctx context.Context, args ExecuteArgs, res *sandbox.Result) *mcp.CallToolResult {
	out := ExecuteOutput{
		ExitCode:   res.ExitCode,
		Stdout:     res.Stdout,
		Stderr:     res.Stderr,
		TimedOut:   res.TimedOut,
		OOMKilled:  res.OOMKilled,
		Truncated:  res.Truncated,
		DurationMS: float64(res.Duration.Microseconds()) / 1000,
		Sandbox:    res.Sandbox,
		Language:   args.Language,
		Signal:     res.Signal,
		Network:    res.Network,
		SessionID:  args.SessionID,
		StateLost:  res.StateLost,
		Packages:   res.Packages,
	}
	links := s.summariseOutput(ctx, &out)
	var extra []mcp.Content
	out.Artifacts, extra, out.ArtifactsNote = s.artifactResults(ctx, res.Artifacts)
	if res.Artifacts != nil {
		out.ArtifactsOmitted = res.Artifacts.Omitted
	}
	p := s.principal(ctx)
	s.log.Info("run", "principal", p.Name, "org", p.Org, "language", args.Language, "sandbox", res.Sandbox, "session", args.SessionID, "state_lost", res.StateLost, "exit_code", res.ExitCode,
		"duration_ms", out.DurationMS, "limit", res.LimitHit(), "stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr),
		"files_in", len(args.Files), "artifacts", len(out.Artifacts))
	return &mcp.CallToolResult{
		Content:           slices.Concat([]mcp.Content{mcp.NewTextContent(RenderText(out, args.Timeout, formatBytes(s.opts.Limits.OutputBytes)))}, links, extra),
		StructuredContent: out,
		IsError:           res.LimitHit() != "",
	}
}

// callOptions are the Options that the arguments of a call of ctx's
// principal are checked against: the server's, with the limits of the
// principal's runs (its memory and CPUs, and its default timeout when its
// own cap is lower). What else the principal may not do, the runner
// chain's principals.Guard refuses, naming the principal's setting.
func (s *Server) callOptions(ctx context.Context) Options {
	o := s.opts
	o.Limits = s.principal(ctx).Limits(o.Limits)
	return o
}

// logRejected logs a request of tool that was refused, with its caller.
func (s *Server) logRejected(ctx context.Context, tool string, err error) {
	p := s.principal(ctx)
	s.log.Info("request rejected", "tool", tool, "principal", p.Name, "org", p.Org, "reason", err.Error())
}

// runErrorMessage turns a runner error into one sentence for the model.
func runErrorMessage(err error, args ExecuteArgs) string {
	if msg, ok := approvalErrorMessage(err); ok {
		return msg
	}
	if msg, ok := packagesErrorMessage(err); ok {
		return msg
	}
	switch {
	case errors.Is(err, pypolicy.ErrPolicy):
		// One sentence that names the line, what was refused and the rule.
		return err.Error()
	case errors.Is(err, context.Canceled):
		return "The run was cancelled before it finished, so it was stopped."
	case errors.Is(err, context.DeadlineExceeded):
		return "The request's deadline passed before the run could finish, so it was stopped."
	case errors.Is(err, sandbox.ErrUnknownLanguage), errors.Is(err, sandbox.ErrLanguageUnavailable):
		return capitalize(err.Error()) + "."
	case errors.Is(err, sandbox.ErrClosed):
		return "The server is shutting down and no longer runs code: try again once it is back."
	case errors.Is(err, sandbox.ErrSandboxUnavailable):
		return fmt.Sprintf("The sandbox failed and the %s code did not complete (%s); this is a server-side problem, so retrying later or telling the operator may help.", args.Language, sandboxDetail(err))
	}
	return fmt.Sprintf("The code could not be run: %v.", err)
}

// sandboxDetail is what a sandbox error says after its prefixes
// ("docker: sandbox unavailable: ...").
func sandboxDetail(err error) string {
	msg := err.Error()
	marker := sandbox.ErrSandboxUnavailable.Error() + ": "
	if i := strings.LastIndex(msg, marker); i >= 0 {
		msg = msg[i+len(marker):]
	}
	return strings.TrimSuffix(strings.TrimSpace(msg), ".")
}

// isSessionError reports whether err is about the session rather than the run.
func isSessionError(err error) bool {
	return errors.Is(err, sessions.ErrUnknownSession) || errors.Is(err, sessions.ErrWrongLanguage)
}
