// Package host is the sandbox backend for mode none: code runs directly, as
// the server's user, with the server's environment. Only the timeout, the
// output cap and the killing of the run's processes still apply. It is for
// local development only.
package host

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/datascience"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// Warning is what the server says, at start and in sandbox_info, about mode none.
const Warning = "CODE_EXEC_SANDBOX=none: code runs UNSANDBOXED with the server's own user, permissions, files, network and environment (secrets included). Use it only for local development with code you trust."

// RunIDVariable is added to the environment of every run in mode none: it
// marks the run's processes so that those that outlive it (daemons, setsid)
// can be found and killed.
const RunIDVariable = "CODE_EXEC_RUN_ID"

// Config configures a mode-none Runner.
type Config struct {
	// Languages are the enabled canonical language names.
	Languages []string
	// WorkRoot is where run directories are made ("" means os.TempDir()).
	WorkRoot string
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// Egress, when set, is the proxy that HTTP_PROXY and HTTPS_PROXY point
	// programs to (CODE_EXEC_NETWORK=allowlist). Nothing makes programs use
	// it: in mode none the allowlist is advice, not a boundary.
	Egress *proxy.Proxy
	// Workspace is the operator's project folder (CODE_EXEC_WORKSPACE);
	// nil for none. Runs see it at its own path, with the server's
	// permissions: mode none cannot make it read-only.
	Workspace *sandbox.Workspace
}

// EgressWarning is what sandbox_info says about an allowlist in mode none.
const EgressWarning = "CODE_EXEC_NETWORK=allowlist is NOT enforced in mode none: programs get HTTP_PROXY and HTTPS_PROXY pointing at the egress proxy, and the report lists what went through it, but any program can ignore the variables and reach the network directly."

// Runner runs code without isolation.
type Runner struct {
	interp   map[string]sandbox.Interpreter
	caps     sandbox.Capabilities
	root     string
	workRoot *executor.WorkRoot
	log      *slog.Logger
	runs     *executor.RunGroup
	egress   *proxy.Proxy
	// python is the environment python runs use (the figure hook), or nil.
	python *datascience.Env
	// workspace is the operator's project folder, or nil.
	workspace *sandbox.Workspace
}

var _ sandbox.Runner = (*Runner)(nil)

// New resolves the interpreters on the server's own PATH.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	wr, err := executor.NewWorkRoot(cfg.WorkRoot, "codeexec-none-", 0o700, log)
	if err != nil {
		return nil, err
	}
	root := wr.Dir
	if err := executor.EnableOrphanReaping(); err != nil {
		_ = wr.Remove()
		return nil, fmt.Errorf("becoming a child subreaper for the orphans of runs: %w", err)
	}
	interp, langs := sandbox.ResolveInterpreters(ctx, cfg.Languages, "")
	r := &Runner{interp: interp, root: root, workRoot: wr, log: log, egress: cfg.Egress}
	if in, ok := interp["python"]; ok {
		var pkgs []sandbox.Package
		r.python, pkgs = executor.PreparePython(ctx, root, in, log)
		for i := range langs {
			if langs[i].Name == "python" {
				langs[i].Packages = pkgs
			}
		}
	}
	var ws *sandbox.WorkspaceStatus
	if w := cfg.Workspace; w != nil {
		if fi, err := os.Stat(w.Dir); err != nil || !fi.IsDir() || !filepath.IsAbs(w.Dir) {
			_ = wr.Remove()
			return nil, fmt.Errorf("mode none: the workspace %q is not an absolute path to a folder (CODE_EXEC_WORKSPACE): %v", w.Dir, err)
		}
		r.workspace = w
		ws = &sandbox.WorkspaceStatus{Path: w.Dir, HostDir: w.Dir, Writable: w.Writable, Enforced: w.Writable,
			Detail: "mode none: runs see it at its own path with the server's own permissions"}
	}
	r.runs = executor.NewRunGroup()
	r.caps = sandbox.Capabilities{
		Mode: sandbox.ModeNone,
		// Every boundary is open.
		Isolation: sandbox.Isolation{},
		Summary:   "none: code runs directly as the server's user with the server's environment",
		Languages: langs,
		RunEnv:    true,
		Protections: []sandbox.Protection{
			{Name: "timeout and output cap", Active: true},
			{Name: "process group kill", Active: true, Detail: "the run's processes are killed when it ends"},
			{Name: "scrubbed environment", Active: false, Detail: "code sees the server's whole environment"},
			{Name: "resource limits (rlimits)", Active: false},
			{Name: "unprivileged user", Active: false, Detail: "code runs with the server's permissions"},
			{Name: "network isolation", Active: false},
			{Name: "filesystem isolation", Active: false},
		},
		Warnings:  []string{Warning},
		Workspace: ws,
	}
	if r.egress != nil {
		r.caps.Egress = r.egress.Policy().Info(false, "127.0.0.1 (a port of each run's own)")
		r.caps.Warnings = append(r.caps.Warnings, EgressWarning)
		for i, p := range r.caps.Protections {
			if p.Name == "network isolation" {
				r.caps.Protections[i].Detail = "not enforced: programs are pointed at the egress proxy but can bypass it"
			}
		}
	}
	if ws != nil && !ws.Enforced {
		r.caps.Warnings = append(r.caps.Warnings, "CODE_EXEC_WORKSPACE_MODE=ro is not enforced in mode none: code can change "+ws.HostDir+" wherever the server's user can")
	}
	return r, nil
}

// Capabilities returns what this runner offers: no isolation.
func (r *Runner) Capabilities() sandbox.Capabilities { return r.caps }

// Run runs req directly, in a fresh directory that is removed afterwards.
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	spec, in, err := sandbox.Lookup(req.Language, r.interp, r.caps.Languages)
	if err != nil {
		return nil, err
	}
	if err := sandbox.CheckFiles(req.Language, req.Files); err != nil {
		return nil, err
	}
	ctx, end, err := r.runs.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	rd, err := executor.NewRunDir(r.root, spec.FileName, req.Code, 0o600, r.log)
	if err != nil {
		return nil, err
	}
	defer rd.Remove()
	dir, file := rd.Dir, rd.File
	before, err := executor.WriteFiles(dir, req.Files, nil)
	if err != nil {
		return nil, err
	}
	res := &sandbox.Result{Sandbox: sandbox.ModeNone}
	part, serve := proxy.NewPart(r.egress, filepath.Base(dir), req.Network)
	defer func() { res.Network = part.Close() }()
	run, err := r.programSpec(executor.ProgramOf(req, spec, in.Path, dir, file, serve))
	if err != nil {
		return nil, err
	}
	run.Stdin, run.Observe = req.Stdin, req.Observe
	err = executor.Spawn(ctx, run, res)
	if err == nil && req.Artifacts != nil {
		res.Artifacts = executor.CollectArtifacts(dir, spec.FileName, before, *req.Artifacts)
	}
	return res, err
}

// programSpec is the Spec of a program of mode none, one-off run or
// session: the server's environment with the run marker, the egress
// listener, WORKSPACE, the package folder and python's figure hook.
func (r *Runner) programSpec(p executor.Program) (executor.Spec, error) {
	marker := RunIDVariable + "=" + filepath.Base(p.Dir)
	path, env := p.Path, append(os.Environ(), marker)
	if p.Serve != nil {
		// Not enforced in mode none (see EgressWarning): the program is
		// pointed at a listener of its own.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return executor.Spec{}, fmt.Errorf("%w: egress listener: %v", sandbox.ErrSandboxUnavailable, err)
		}
		p.Serve(l)
		env = append(withoutProxyEnv(env), egress.ProxyEnv(l.Addr().String())...)
	}
	if r.workspace != nil {
		env = append(env, sandbox.WorkspaceVariable+"="+r.workspace.Dir)
	}
	if p.Packages != nil {
		// No mount namespace here: the program sees the folder at its own
		// path, with the server's permissions.
		env = append(env, sandbox.PackageEnv(p.Lang, p.Packages.HostDir)...)
	}
	env = sandbox.WithEnv(env, p.Env)
	if p.Lang == "python" && r.python != nil {
		path, env = r.python.Python, executor.PythonEnv(env, r.python)
	}
	return executor.Spec{
		Path:      path,
		Args:      p.Args,
		Env:       env,
		Dir:       p.Dir,
		Limits:    p.Limits,
		Direct:    true,
		RunMarker: marker,
	}, nil
}

// withoutProxyEnv drops the server's own proxy variables, which the egress
// proxy's replace.
func withoutProxyEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Close stops the runs in flight and removes the work root. It is safe to
// call more than once.
func (r *Runner) Close() error {
	if !r.runs.Close() {
		return nil
	}
	return r.workRoot.Remove()
}
