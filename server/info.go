package server

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/server/principals"
)

func infoTool() mcp.Tool {
	return mcp.Tool{
		Name:            ToolInfo,
		Title:           "Sandbox information",
		Description:     "Describe this code-execution server: the sandbox mode in force, the languages and their versions, the limits, the network and approval policies, and which protections are active on this host.",
		RawInputSchema:  argSchema(infoArgs),
		RawOutputSchema: outputSchema[InfoOutput](),
		Annotations: mcp.ToolAnnotation{
			Title:           "Sandbox information",
			ReadOnlyHint:    mcp.ToBoolPtr(true),
			DestructiveHint: mcp.ToBoolPtr(false),
			IdempotentHint:  mcp.ToBoolPtr(true),
			OpenWorldHint:   mcp.ToBoolPtr(false),
		},
	}
}

// InfoOutput is sandbox_info's structuredContent.
type InfoOutput struct {
	Mode      sandbox.Mode `json:"mode"`
	Sandboxed bool         `json:"sandboxed"`
	// Isolation says in a few words what separates a run from the host.
	Isolation string                   `json:"isolation" schema:"optional"`
	Warnings  []string                 `json:"warnings,omitempty"`
	Languages []sandbox.LanguageStatus `json:"languages" schema:"shallow"`
	Limits    InfoLimits               `json:"limits" schema:"shallow"`
	Network   string                   `json:"network"`
	// NetworkPolicy is the allowlist under CODE_EXEC_NETWORK=allowlist.
	NetworkPolicy *egress.PolicyInfo   `json:"network_policy,omitempty" jsonschema:"The network allowlist, when runs reach the network through codeexec's egress proxy (CODE_EXEC_NETWORK=allowlist)."`
	Approval      string               `json:"approval"`
	Protections   []sandbox.Protection `json:"protections" schema:"shallow"`
	// Boundaries declares, as data, which boundaries between a run and the
	// host hold (sandbox.Isolation); Protections says how, in the backend's
	// own words.
	Boundaries sandbox.Isolation `json:"boundaries" jsonschema:"which boundaries between a run and the host hold, said the same way in every mode"`
	Sessions   *InfoSessions     `json:"sessions,omitempty" jsonschema:"session_create's limits, and the caller's open sessions (session_list lists them); absent when sessions are off"`
	// Workspace says where runs see the operator's project folder, and
	// whether they may change it; absent when there is none.
	Workspace *sandbox.WorkspaceStatus `json:"workspace,omitempty" jsonschema:"the operator's project folder that every run sees (CODE_EXEC_WORKSPACE); absent when there is none"`
	// Packages says whether code_execute's packages argument is accepted,
	// from which indexes, and how full the cache is.
	Packages *packages.Info `json:"packages" schema:"optional" jsonschema:"code_execute's packages argument: whether it is accepted (CODE_EXEC_PACKAGES), from which indexes, and the cache of installed lists"`
	// Principal is who asks: the limits, languages, network, approval
	// and packages above are its own.
	Principal *InfoPrincipal `json:"principal,omitempty" jsonschema:"who asks (its principal): the languages, limits, network, approval and packages above are its own"`
	Version   string         `json:"version" schema:"optional"`
}

// InfoPrincipal is what sandbox_info says of the caller's principal
// besides the limits it shares with the server's.
type InfoPrincipal struct {
	Name string `json:"name"`
	Org  string `json:"org,omitempty"`
	// Files is none, ro or rw.
	Files string `json:"files" jsonschema:"none (no files in, no artifacts out), ro (files in, no artifacts out, the workspace read-only) or rw"`
	// MaxConcurrent and RunsPerMinute are its own limits (0: none).
	MaxConcurrent int `json:"max_concurrent,omitempty" jsonschema:"its requests in flight at once; more are refused, to retry later"`
	RunsPerMinute int `json:"runs_per_minute,omitempty" jsonschema:"its runs started a minute; more are refused, saying when to retry"`
}

// InfoSessions is what sandbox_info says of sessions.
type InfoSessions struct {
	MaxSessions        int     `json:"max_sessions" schema:"optional"`
	IdleTimeoutSeconds float64 `json:"idle_timeout_seconds" schema:"optional"`
	MaxLifetimeSeconds float64 `json:"max_lifetime_seconds" schema:"optional"`
	// Open counts the caller's open sessions.
	Open int `json:"open" schema:"optional"`
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

// Info builds sandbox_info's answer for the server's first principal (the
// only one without a principals file).
func (s *Server) Info() InfoOutput { return s.infoFor(s.principals.List()[0]) }

// infoFor builds sandbox_info's answer for principal p: the server's
// sandbox, with p's languages, limits, network, approval policy, packages
// and files.
func (s *Server) infoFor(p *principals.Principal) InfoOutput {
	caps := s.runner.Capabilities()
	o := s.opts
	pol := p.Policy
	lim := p.Limits(o.Limits)
	var taskCap float64
	if s.tasks != nil {
		taskCap = o.TaskMaxTimeout.Seconds()
		if pol.Own("max_timeout") {
			taskCap = pol.MaxTimeout.Seconds()
		}
	}
	egressInfo := approvals.NetworkPolicy(caps.Egress, pol.Network)
	network := "not isolated: code can reach the network like any program of the server's user"
	switch {
	case egressInfo != nil && !egressInfo.Enforced:
		network = "not isolated, allowlist NOT enforced: programs are pointed at codeexec's egress proxy, which applies the allowlist to what goes through it, but they can bypass it and reach the network like any program of the server's user; " + egress.ProxyClients(nodeVersion(caps))
	case egressInfo != nil && len(egressInfo.Allow) == 0:
		network = "none for principal " + p.Name + " (its network: none): each run has a loopback interface of its own and its only way out, codeexec's egress proxy, refuses every destination"
	case egressInfo != nil:
		network = "allowlist: each run has a loopback interface of its own and reaches the network only through codeexec's egress proxy (HTTP_PROXY/HTTPS_PROXY), which lets through the allowed destinations (network_policy) and refuses the rest; " + egress.ProxyClients(nodeVersion(caps))
	case caps.Isolation.Network:
		network = "none: each run has no network but a loopback interface of its own"
	}
	langs := make([]sandbox.LanguageStatus, len(caps.Languages))
	for i, l := range caps.Languages {
		if l.Available && !slices.Contains(pol.Languages, l.Name) {
			l.Available, l.Reason = false, "not among principal "+p.Name+"'s languages"
		}
		langs[i] = l
	}
	files, arts := o.Files.MaxFiles, o.Artifacts.MaxArtifacts
	if pol.Files == principals.FilesNone {
		files = 0
	}
	if pol.Files != principals.FilesWrite {
		arts = 0
	}
	return InfoOutput{
		Mode:       caps.Mode,
		Sandboxed:  caps.Isolation.Any(),
		Isolation:  caps.Summary,
		Boundaries: caps.Isolation,
		Warnings:   caps.Warnings,
		Languages:  langs,
		Limits: InfoLimits{
			DefaultTimeoutSeconds: lim.Timeout.Seconds(),
			MaxTimeoutSeconds:     pol.MaxTimeout.Seconds(),
			MemoryBytes:           lim.MemoryBytes,
			CPUs:                  lim.CPUs,
			Processes:             lim.Processes,
			OpenFiles:             lim.OpenFiles,
			FileSizeBytes:         lim.FileSizeBytes,
			MaxOutputBytes:        lim.OutputBytes,
			MaxCodeBytes:          o.MaxCode,
			MaxStdinBytes:         o.MaxStdin,
			MaxConcurrency:        o.MaxConcurrency,
			MaxTaskTimeoutSeconds: taskCap,
			MaxFiles:              files,
			MaxFilesBytes:         o.Files.MaxTotalBytes,
			MaxArtifacts:          arts,
			MaxArtifactBytes:      o.Artifacts.MaxBytes,
			ArtifactTTLSeconds:    s.artifactTTL().Seconds(),
		},
		Network:       network,
		NetworkPolicy: egressInfo,
		Approval:      s.approvalDescription(pol.Approval),
		Protections:   caps.Protections,
		Workspace:     caps.Workspace,
		Packages:      s.packagesInfo(p),
		Principal: &InfoPrincipal{Name: p.Name, Org: p.Org, Files: string(pol.Files),
			MaxConcurrent: pol.MaxConcurrent, RunsPerMinute: pol.RunsPerMinute},
		Version: o.Version,
	}
}

// packagesInfo is what sandbox_info says of packages to principal p.
func (s *Server) packagesInfo(p *principals.Principal) *packages.Info {
	switch {
	case s.opts.Packages == nil:
		return &packages.Info{Detail: "off (CODE_EXEC_PACKAGES=false): the packages argument is refused; programs import only what the sandbox has installed"}
	case !p.Policy.Packages:
		return &packages.Info{Detail: "off for principal " + p.Name + " (its packages: false): the packages argument is refused; programs import only what the sandbox has installed"}
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
	p := s.principal(ctx)
	info := s.infoFor(p)
	if m := s.opts.Sessions; m != nil {
		_, idle, life := m.Limits()
		info.Sessions = &InfoSessions{MaxSessions: p.Policy.MaxSessions, IdleTimeoutSeconds: idle.Seconds(), MaxLifetimeSeconds: life.Seconds(), Open: len(m.List(s.owner(ctx)))}
	}
	text, _ := json.MarshalIndent(info, "", "  ")
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent(string(text))},
		StructuredContent: info,
	}, nil
}
