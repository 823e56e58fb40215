package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Tool names.
const (
	ToolExecute = "code_execute"
	ToolInfo    = "sandbox_info"
)

// modeEnum is the JSON list of the sandbox modes, for the schemas.
var modeEnum = func() string {
	b, err := json.Marshal(sandbox.Modes)
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// executeOutputSchema is the JSON Schema of code_execute's structuredContent.
var executeOutputSchema = `{
  "type": "object",
  "properties": {
    "exit_code": {"type": "integer", "description": "Exit status; 128+N when killed by signal N."},
    "stdout": {"type": "string"},
    "stderr": {"type": "string"},
    "timed_out": {"type": "boolean", "description": "The timeout stopped the run."},
    "oom_killed": {"type": "boolean", "description": "The memory limit stopped the run."},
    "truncated": {"type": "boolean", "description": "The output cap was reached and the run stopped."},
    "duration_ms": {"type": "number", "description": "Wall-clock duration of the run in milliseconds."},
    "sandbox": {"type": "string", "enum": ` + modeEnum + `, "description": "The sandbox mode that ran the code."},
    "language": {"type": "string"},
    "signal": {"type": "string", "description": "The signal that ended the program, if any."},
    "network": {
      "type": "object",
      "description": "What the run reached and what was refused, when runs reach the network through codeexec's egress proxy (CODE_EXEC_NETWORK=allowlist).",
      "properties": {
        "reached": {"type": "array", "items": {
          "type": "object",
          "properties": {
            "host": {"type": "string"},
            "port": {"type": "integer"},
            "address": {"type": "string", "description": "The IP address connected to."},
            "connections": {"type": "integer"},
            "bytes_sent": {"type": "integer"},
            "bytes_received": {"type": "integer"}
          },
          "required": ["host", "port", "address", "connections", "bytes_sent", "bytes_received"]
        }},
        "refused": {"type": "array", "items": {
          "type": "object",
          "properties": {
            "host": {"type": "string"},
            "port": {"type": "integer"},
            "reason": {"type": "string", "enum": ["not_allowed", "port", "private_address", "cap", "unresolved", "unreachable", "bad_request"]},
            "detail": {"type": "string"},
            "count": {"type": "integer"}
          },
          "required": ["host", "reason", "count"]
        }},
        "omitted": {"type": "integer", "description": "Destinations left out of the lists, which are bounded."}
      },
      "required": ["reached", "refused"]
    },
    "session_id": {"type": "string", "description": "The session the code ran in, if any."},
    "state_lost": {"type": "boolean", "description": "In a session: the call stopped the interpreter, so the variables of earlier calls are gone (the files stay)."},
    "packages": {
      "type": "object",
      "description": "The packages the run imported from (the packages argument): the normalized list, and whether it came from the cache or was installed for this call.",
      "properties": {
        "list": {"type": "array", "items": {"type": "string"}},
        "cached": {"type": "boolean"},
        "install_ms": {"type": "number"}
      },
      "required": ["list", "cached"]
    },
    "artifacts": {
      "type": "array",
      "description": "Files the program created or changed in its working directory. Images also come as image content, small text files as embedded resources, others as resource links; resources/read serves each uri for a while.",
      "items": {
        "type": "object",
        "properties": {
          "path": {"type": "string", "description": "Relative to the working directory."},
          "size": {"type": "integer", "description": "Bytes."},
          "mime_type": {"type": "string"},
          "sha256": {"type": "string", "description": "Hex SHA-256 of the content."},
          "uri": {"type": "string", "description": "codeexec://runs/<run id>/<path>, served by resources/read; absent when the file could not be kept."}
        },
        "required": ["path", "size", "mime_type", "sha256"]
      }
    },
    "artifacts_omitted": {
      "type": "array",
      "description": "Files that changed but were not brought back, and why (a cap, a symbolic link, a special file).",
      "items": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "size": {"type": "integer"}, "reason": {"type": "string"}},
        "required": ["path", "reason"]
      }
    },
    "artifacts_note": {"type": "string", "description": "What was left out of artifacts, in a sentence or two."}
  },
  "required": ["exit_code", "stdout", "stderr", "timed_out", "oom_killed", "truncated", "duration_ms", "sandbox"]
}`

var infoOutputSchema = `{
  "type": "object",
  "properties": {
    "mode": {"type": "string", "enum": ` + modeEnum + `},
    "sandboxed": {"type": "boolean"},
    "isolation": {"type": "string"},
    "warnings": {"type": "array", "items": {"type": "string"}},
    "languages": {"type": "array", "items": {"type": "object"}},
    "limits": {"type": "object"},
    "network": {"type": "string"},
    "network_policy": {
      "type": "object",
      "description": "The network allowlist, when runs reach the network through codeexec's egress proxy (CODE_EXEC_NETWORK=allowlist).",
      "properties": {
        "allow": {"type": "array", "items": {"type": "string"}},
        "allow_private": {"type": "boolean"},
        "enforced": {"type": "boolean", "description": "false in mode none: programs are pointed at the proxy but can bypass it."},
        "proxy": {"type": "string"},
        "max_connections": {"type": "integer"},
        "max_bytes": {"type": "integer"},
        "connect_timeout_seconds": {"type": "number"},
        "idle_timeout_seconds": {"type": "number"}
      },
      "required": ["allow", "allow_private", "enforced"]
    },
    "approval": {"type": "string"},
    "protections": {"type": "array", "items": {"type": "object"}},
    "workspace": {
      "type": "object",
      "description": "the operator's project folder that every run sees (CODE_EXEC_WORKSPACE); absent when there is none",
      "properties": {
        "path": {"type": "string", "description": "where runs see it; the WORKSPACE variable says so too"},
        "host_dir": {"type": "string"},
        "writable": {"type": "boolean"},
        "enforced": {"type": "boolean", "description": "read-only really is read-only for runs"},
        "detail": {"type": "string"}
      },
      "required": ["path", "host_dir", "writable", "enforced"]
    },
    "boundaries": {
      "type": "object",
      "description": "which boundaries between a run and the host hold, said the same way in every mode",
      "properties": {
        "network": {"type": "boolean"},
        "filesystem": {"type": "boolean"},
        "identity": {"type": "boolean"},
        "environment": {"type": "boolean"},
        "processes": {"type": "boolean"}
      },
      "required": ["network", "filesystem", "identity", "environment", "processes"]
    },
    "sessions": {
      "type": "object",
      "description": "session_create's limits, and the caller's open sessions (session_list lists them); absent when sessions are off",
      "properties": {
        "max_sessions": {"type": "integer"},
        "idle_timeout_seconds": {"type": "number"},
        "max_lifetime_seconds": {"type": "number"},
        "open": {"type": "integer"}
      }
    },
    "packages": {
      "type": "object",
      "description": "code_execute's packages argument: whether it is accepted (CODE_EXEC_PACKAGES), from which indexes, and the cache of installed lists",
      "properties": {
        "enabled": {"type": "boolean"},
        "pip_index_url": {"type": "string"},
        "npm_registry": {"type": "string"},
        "install_allow": {"type": "array", "items": {"type": "string"}, "description": "the destinations the install phase may reach (the index hosts, and CODE_EXEC_PACKAGES_ALLOW)"},
        "install_timeout_seconds": {"type": "number"},
        "max_install_bytes": {"type": "integer"},
        "max_packages": {"type": "integer"},
        "cache": {
          "type": "object",
          "properties": {
            "dir": {"type": "string"},
            "entries": {"type": "integer"},
            "bytes": {"type": "integer"},
            "max_bytes": {"type": "integer"},
            "in_use": {"type": "integer"}
          },
          "required": ["entries", "bytes", "max_bytes"]
        },
        "detail": {"type": "string"}
      },
      "required": ["enabled", "detail"]
    },
    "version": {"type": "string"}
  },
  "required": ["mode", "sandboxed", "languages", "limits", "network", "approval", "protections", "boundaries"]
}`

// ExecuteOutput is code_execute's structuredContent.
type ExecuteOutput struct {
	ExitCode   int     `json:"exit_code"`
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	TimedOut   bool    `json:"timed_out"`
	OOMKilled  bool    `json:"oom_killed"`
	Truncated  bool    `json:"truncated"`
	DurationMS float64 `json:"duration_ms"`
	Sandbox    string  `json:"sandbox"`
	Language   string  `json:"language"`
	Signal     string  `json:"signal,omitempty"`
	// Network is what the run reached and what was refused, under
	// CODE_EXEC_NETWORK=allowlist.
	Network   *egress.Report `json:"network,omitempty"`
	SessionID string         `json:"session_id,omitempty"`
	StateLost bool           `json:"state_lost,omitempty"`
	// Packages are the packages the run imported from, when it named some.
	Packages *sandbox.PackagesReport `json:"packages,omitempty"`
	// Artifacts are the files the run created or changed, ArtifactsOmitted
	// those it left out, and ArtifactsNote says so in words.
	Artifacts        []ArtifactOutput     `json:"artifacts,omitempty"`
	ArtifactsOmitted []artifacts.Omission `json:"artifacts_omitted,omitempty"`
	ArtifactsNote    string               `json:"artifacts_note,omitempty"`
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
	if o.Packages != nil {
		desc += " Packages named in the packages argument (pinned versions from the operator's index) are installed first and cached; the program itself keeps no network access."
	}
	return mcp.Tool{
		Name:            ToolExecute,
		Title:           "Execute code",
		Description:     desc,
		RawInputSchema:  argSchema(executeArgs(&ExecuteArgs{}, o)),
		RawOutputSchema: json.RawMessage(executeOutputSchema),
		Annotations: mcp.ToolAnnotation{
			Title:           "Execute code",
			ReadOnlyHint:    mcp.ToBoolPtr(false),
			DestructiveHint: mcp.ToBoolPtr(destructive),
			IdempotentHint:  mcp.ToBoolPtr(false),
			OpenWorldHint:   mcp.ToBoolPtr(openWorld),
		},
	}
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

func infoTool() mcp.Tool {
	return mcp.Tool{
		Name:            ToolInfo,
		Title:           "Sandbox information",
		Description:     "Describe this code-execution server: the sandbox mode in force, the languages and their versions, the limits, the network and approval policies, and which protections are active on this host.",
		RawInputSchema:  argSchema(infoArgs),
		RawOutputSchema: json.RawMessage(infoOutputSchema),
		Annotations: mcp.ToolAnnotation{
			Title:           "Sandbox information",
			ReadOnlyHint:    mcp.ToBoolPtr(true),
			DestructiveHint: mcp.ToBoolPtr(false),
			IdempotentHint:  mcp.ToBoolPtr(true),
			OpenWorldHint:   mcp.ToBoolPtr(false),
		},
	}
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
// a task (see inTask).
func (s *Server) execute(ctx context.Context, req mcp.CallToolRequest) *mcp.CallToolResult {
	// A task's call was decoded when the task was made.
	args, decoded := ctx.Value(decodedArgsKey{}).(ExecuteArgs)
	if !decoded {
		opts := s.opts
		if inTask(ctx) {
			opts.MaxTimeout = opts.TaskMaxTimeout
		}
		var err error
		if args, err = DecodeExecuteArgs(req.GetRawArguments(), opts); err != nil {
			s.log.Info("request rejected", "tool", ToolExecute, "reason", err.Error())
			return mcp.NewToolResultError(err.Error())
		}
	}
	if !inTask(ctx) {
		// A task's run lives as long as the task, not the session.
		var done func()
		ctx, done = s.trackRun(ctx)
		defer done()
	}
	runReq, refusal := s.runRequest(args)
	if refusal != nil {
		return refusal
	}
	if runReq.Session != "" {
		// The session must be the caller's before anyone is asked to
		// approve code for it; the person approving the call sees the
		// packages the session installed when it started.
		info, err := s.opts.Sessions.Check(s.owner(ctx), runReq.Session)
		if err != nil {
			return mcp.NewToolResultError(sessionErrorMessage(err))
		}
		runReq.Packages = info.Packages
	}
	ctx, live := s.liveOutput(ctx, req)
	ctx = s.callContext(ctx, req)
	runReq.Observe = live.observe()
	res, err := s.runner.Run(ctx, runReq)
	live.close()
	switch {
	case isInputRequired(err):
		return inputRequest(err)
	case err != nil && args.SessionID != "" && isSessionError(err):
		return mcp.NewToolResultError(sessionErrorMessage(err))
	case errors.Is(err, artifacts.ErrInvalidFile):
		s.log.Info("request rejected", "tool", ToolExecute, "reason", err.Error())
		return mcp.NewToolResultError(filesErrorMessage(err))
	case err != nil:
		msg := runErrorMessage(err, args)
		_, isApproval := approvalErrorMessage(err)
		switch {
		case errors.Is(err, pypolicy.ErrPolicy):
			s.log.Info("refused by the restricted Python policy", "language", args.Language, "reason", err.Error())
		case errors.Is(err, packages.ErrInstall), errors.Is(err, packages.ErrTooLarge):
			s.log.Info("packages not installed", "language", args.Language, "packages", args.Packages, "err", err)
		case !isApproval:
			s.log.Warn("run failed", "language", args.Language, "err", err)
		}
		return mcp.NewToolResultError(msg)
	}
	out := ExecuteOutput{
		ExitCode:   res.ExitCode,
		Stdout:     res.Stdout,
		Stderr:     res.Stderr,
		TimedOut:   res.TimedOut,
		OOMKilled:  res.OOMKilled,
		Truncated:  res.Truncated,
		DurationMS: float64(res.Duration.Microseconds()) / 1000,
		Sandbox:    string(res.Sandbox),
		Language:   args.Language,
		Signal:     res.Signal,
		Network:    res.Network,
		SessionID:  args.SessionID,
		StateLost:  res.StateLost,
		Packages:   res.Packages,
	}
	var extra []mcp.Content
	out.Artifacts, extra, out.ArtifactsNote = s.artifactResults(ctx, res.Artifacts)
	if res.Artifacts != nil {
		out.ArtifactsOmitted = res.Artifacts.Omitted
	}
	s.log.Info("run", "language", args.Language, "sandbox", res.Sandbox, "session", args.SessionID, "state_lost", res.StateLost, "exit_code", res.ExitCode,
		"duration_ms", out.DurationMS, "limit", res.LimitHit(), "stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr),
		"files_in", len(args.Files), "artifacts", len(out.Artifacts))
	result := &mcp.CallToolResult{
		Content:           append([]mcp.Content{mcp.NewTextContent(RenderText(out, args.Timeout, formatBytes(s.opts.Limits.OutputBytes)))}, extra...),
		StructuredContent: out,
		IsError:           res.LimitHit() != "",
	}
	return result
}

// runRequest is the request of a call of code_execute with args, or the
// result that refuses it.
func (s *Server) runRequest(args ExecuteArgs) (sandbox.Request, *mcp.CallToolResult) {
	if args.SessionID != "" && len(args.Packages) > 0 {
		// A session's packages are installed when it starts.
		return sandbox.Request{}, mcp.NewToolResultError("packages cannot be sent with session_id: a session gets its packages when it is created (session_create's packages argument); create a session with the whole list, or run without session_id")
	}
	limits := s.opts.Limits
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
	return req, nil
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

// RenderText is the text content a model reads: stdout, then stderr, then
// how the run ended.
func RenderText(o ExecuteOutput, timeout time.Duration, outputCap string) string {
	var b strings.Builder
	section := func(name, body string) {
		if body == "" {
			return
		}
		fmt.Fprintf(&b, "%s:\n%s", name, body)
		if !strings.HasSuffix(body, "\n") {
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	section("stdout", o.Stdout)
	section("stderr", o.Stderr)
	if o.Stdout == "" && o.Stderr == "" {
		b.WriteString("(no output)\n\n")
	}
	section("network", renderNetwork(o.Network))
	if p := o.Packages; p != nil {
		how := "from the cache"
		if !p.Cached {
			how = "installed in " + fmtMillis(p.InstallMS)
		}
		fmt.Fprintf(&b, "Packages: %s (%s).\n\n", strings.Join(p.List, ", "), how)
	}
	ran := fmt.Sprintf("after %s in the %s sandbox", fmtMillis(o.DurationMS), o.Sandbox)
	switch {
	case o.TimedOut:
		fmt.Fprintf(&b, "Timed out: the run was stopped at its %s limit (%s). Make the code faster or ask for a longer timeout_seconds, within the cap shown by sandbox_info.", timeout, ran)
	case o.OOMKilled:
		fmt.Fprintf(&b, "Out of memory: the run was killed at its memory limit (%s). Use less memory, for example by processing data in chunks.", ran)
	case o.Truncated:
		fmt.Fprintf(&b, "Output limit reached: the run wrote more than %s and was stopped; the output above is cut (%s). Print less, for example a summary.", outputCap, ran)
	case o.Signal != "":
		fmt.Fprintf(&b, "Killed by signal %s, exit code %d (%s).", o.Signal, o.ExitCode, ran)
	default:
		fmt.Fprintf(&b, "Exit code %d (%s).", o.ExitCode, ran)
	}
	if o.StateLost {
		fmt.Fprintf(&b, " The session's interpreter was stopped, so the variables of earlier calls are lost; its files remain, and the next call in session %s starts a fresh interpreter.", o.SessionID)
	}
	if len(o.Artifacts) > 0 {
		b.WriteString("\n\nFiles the run made or changed:")
		for _, a := range o.Artifacts {
			fmt.Fprintf(&b, "\n- %s (%s, %s)", a.Path, a.MIMEType, artifacts.FormatBytes(a.Size))
			if a.URI != "" {
				fmt.Fprintf(&b, " %s", a.URI)
			}
		}
	}
	if o.ArtifactsNote != "" {
		b.WriteString("\n\n" + o.ArtifactsNote)
	}
	return b.String()
}

// reasonText says why the egress proxy refused a destination.
var reasonText = map[egress.Reason]string{
	egress.ReasonNotAllowed:     "not on the allowlist",
	egress.ReasonPort:           "port not allowed for this host",
	egress.ReasonPrivateAddress: "private or internal address",
	egress.ReasonCap:            "the run's network cap was reached",
	egress.ReasonUnresolved:     "name not resolved",
	egress.ReasonUnreachable:    "unreachable",
	egress.ReasonBadRequest:     "not a request the proxy forwards",
}

// renderNetwork lists, one line each, what the run reached and what was
// refused, or "" when nothing went through the proxy.
func renderNetwork(r *egress.Report) string {
	if r.Empty() {
		return ""
	}
	var b strings.Builder
	for _, d := range r.Reached {
		fmt.Fprintf(&b, "reached %s (%s, %d connection%s, %d bytes sent, %d received)\n", hostPortText(d.Host, d.Port), d.Address,
			d.Connections, map[bool]string{true: "", false: "s"}[d.Connections == 1], d.BytesSent, d.BytesReceived)
	}
	for _, d := range r.Refused {
		why := reasonText[d.Reason]
		if d.Detail != "" {
			why += ": " + d.Detail
		}
		fmt.Fprintf(&b, "refused %s (%s)\n", hostPortText(d.Host, d.Port), why)
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "... and %d more destinations\n", r.Omitted)
	}
	return b.String()
}

func hostPortText(host string, port int) string {
	if port == 0 {
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func fmtMillis(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// formatBytes writes a byte count the way it is configured (256m, 64k, 1g).
func formatBytes(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dg", n/(1<<30))
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dm", n/(1<<20))
	case n != 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dk", n/(1<<10))
	}
	return fmt.Sprintf("%d", n)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// InfoOutput is sandbox_info's structuredContent.
type InfoOutput struct {
	Mode      sandbox.Mode `json:"mode"`
	Sandboxed bool         `json:"sandboxed"`
	// Isolation says in a few words what separates a run from the host.
	Isolation string `json:"isolation"`
	// Boundaries declares, as data, which boundaries between a run and the
	// host hold (sandbox.Isolation); Protections says how, in the backend's
	// own words.
	Boundaries sandbox.Isolation        `json:"boundaries"`
	Warnings   []string                 `json:"warnings,omitempty"`
	Languages  []sandbox.LanguageStatus `json:"languages"`
	Limits     InfoLimits               `json:"limits"`
	Network    string                   `json:"network"`
	// NetworkPolicy is the allowlist under CODE_EXEC_NETWORK=allowlist.
	NetworkPolicy *egress.PolicyInfo   `json:"network_policy,omitempty"`
	Approval      string               `json:"approval"`
	Protections   []sandbox.Protection `json:"protections"`
	Sessions      *InfoSessions        `json:"sessions,omitempty"`
	// Workspace says where runs see the operator's project folder, and
	// whether they may change it; absent when there is none.
	Workspace *sandbox.WorkspaceStatus `json:"workspace,omitempty"`
	// Packages says whether code_execute's packages argument is accepted,
	// from which indexes, and how full the cache is.
	Packages *packages.Info `json:"packages"`
	Version  string         `json:"version"`
}

// InfoSessions is what sandbox_info says of sessions.
type InfoSessions struct {
	MaxSessions        int     `json:"max_sessions"`
	IdleTimeoutSeconds float64 `json:"idle_timeout_seconds"`
	MaxLifetimeSeconds float64 `json:"max_lifetime_seconds"`
	// Open counts the caller's open sessions.
	Open int `json:"open"`
}

// InfoLimits are the operator's limits as sandbox_info reports them.
type InfoLimits struct {
	DefaultTimeoutSeconds float64 `json:"default_timeout_seconds"`
	MaxTimeoutSeconds     float64 `json:"max_timeout_seconds"`
	MemoryBytes           int64   `json:"memory_bytes"`
	CPUs                  float64 `json:"cpus"`
	Processes             int     `json:"processes"`
	OpenFiles             int     `json:"open_files"`
	FileSizeBytes         int64   `json:"file_size_bytes"`
	MaxOutputBytes        int64   `json:"max_output_bytes"`
	MaxCodeBytes          int64   `json:"max_code_bytes"`
	MaxStdinBytes         int64   `json:"max_stdin_bytes"`
	MaxConcurrency        int     `json:"max_concurrency"`
	// MaxTaskTimeoutSeconds is the cap of timeout_seconds for a call run
	// as an MCP task (absent when tasks are off).
	MaxTaskTimeoutSeconds float64 `json:"max_task_timeout_seconds,omitempty"`
	// Files in (the files argument) and artifacts out.
	MaxFiles           int     `json:"max_files"`
	MaxFilesBytes      int64   `json:"max_files_bytes"`
	MaxArtifacts       int     `json:"max_artifacts"`
	MaxArtifactBytes   int64   `json:"max_artifact_bytes"`
	ArtifactTTLSeconds float64 `json:"artifact_ttl_seconds"`
}

// Info builds sandbox_info's answer.
func (s *Server) Info() InfoOutput {
	caps := s.runner.Capabilities()
	o := s.opts
	var taskCap float64
	if s.tasks != nil {
		taskCap = o.TaskMaxTimeout.Seconds()
	}
	network := "not isolated: code can reach the network like any program of the server's user"
	switch {
	case caps.Egress != nil && !caps.Egress.Enforced:
		network = "not isolated, allowlist NOT enforced: programs are pointed at codeexec's egress proxy, which applies the allowlist to what goes through it, but they can bypass it and reach the network like any program of the server's user"
	case caps.Egress != nil:
		network = "allowlist: each run has a loopback interface of its own and reaches the network only through codeexec's egress proxy (HTTP_PROXY/HTTPS_PROXY), which lets through the allowed destinations (network_policy) and refuses the rest"
	case caps.Isolation.Network:
		network = "none: each run has no network but a loopback interface of its own"
	}
	return InfoOutput{
		Mode:       caps.Mode,
		Sandboxed:  caps.Isolation.Any(),
		Isolation:  caps.Summary,
		Boundaries: caps.Isolation,
		Warnings:   caps.Warnings,
		Languages:  caps.Languages,
		Limits: InfoLimits{
			DefaultTimeoutSeconds: o.Limits.Timeout.Seconds(),
			MaxTimeoutSeconds:     o.MaxTimeout.Seconds(),
			MemoryBytes:           o.Limits.MemoryBytes,
			CPUs:                  o.Limits.CPUs,
			Processes:             o.Limits.Processes,
			OpenFiles:             o.Limits.OpenFiles,
			FileSizeBytes:         o.Limits.FileSizeBytes,
			MaxOutputBytes:        o.Limits.OutputBytes,
			MaxCodeBytes:          o.MaxCode,
			MaxStdinBytes:         o.MaxStdin,
			MaxConcurrency:        o.MaxConcurrency,
			MaxTaskTimeoutSeconds: taskCap,
			MaxFiles:              o.Files.MaxFiles,
			MaxFilesBytes:         o.Files.MaxTotalBytes,
			MaxArtifacts:          o.Artifacts.MaxArtifacts,
			MaxArtifactBytes:      o.Artifacts.MaxBytes,
			ArtifactTTLSeconds:    s.artifactTTL().Seconds(),
		},
		Network:       network,
		NetworkPolicy: caps.Egress,
		Approval:      s.approvalDescription(),
		Protections:   caps.Protections,
		Workspace:     caps.Workspace,
		Packages:      s.packagesInfo(),
		Version:       o.Version,
	}
}

// packagesInfo is what sandbox_info says of packages.
func (s *Server) packagesInfo() *packages.Info {
	if s.opts.Packages == nil {
		return &packages.Info{Detail: "off (CODE_EXEC_PACKAGES=false): the packages argument is refused; programs import only what the sandbox has installed"}
	}
	return s.opts.Packages.Info()
}

// artifactTTL is how long the store keeps artifacts (0 without a store).
func (s *Server) artifactTTL() time.Duration {
	if s.opts.Store == nil {
		return 0
	}
	return s.opts.Store.TTL()
}

func (s *Server) handleInfo(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if err := decodeArgs(req.GetRawArguments(), infoArgs); err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	info := s.Info()
	if m := s.opts.Sessions; m != nil {
		n, idle, life := m.Limits()
		info.Sessions = &InfoSessions{MaxSessions: n, IdleTimeoutSeconds: idle.Seconds(), MaxLifetimeSeconds: life.Seconds(), Open: len(m.List(s.owner(ctx)))}
	}
	text, _ := json.MarshalIndent(info, "", "  ")
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent(string(text))},
		StructuredContent: info,
	}, nil
}

// tools returns every tool with its handler.
func (s *Server) tools() []mcpserver.ServerTool {
	tools := []mcpserver.ServerTool{
		{Tool: s.executeTool(), Handler: s.handleExecute},
		{Tool: infoTool(), Handler: s.handleInfo},
	}
	if s.opts.Sessions != nil {
		st := sessionTools(&s.opts)
		tools = append(tools,
			mcpserver.ServerTool{Tool: st[0], Handler: s.handleSessionCreate},
			mcpserver.ServerTool{Tool: st[1], Handler: s.handleSessionClose},
			mcpserver.ServerTool{Tool: st[2], Handler: s.handleSessionList},
		)
	}
	return tools
}

// isSessionError reports whether err is about the session rather than the run.
func isSessionError(err error) bool {
	return errors.Is(err, sessions.ErrUnknownSession) || errors.Is(err, sessions.ErrWrongLanguage)
}
