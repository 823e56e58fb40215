// Command codeexec is an MCP server that runs code in a sandbox.
//
//	codeexec [--transport stdio|sse|http] [--addr host:port]
//
// Every setting is an environment variable CODE_EXEC_*; see codeexec --help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
	"github.com/codeexec/codeexec/sandbox/sessions"
	"github.com/codeexec/codeexec/server"
	"github.com/codeexec/codeexec/server/metrics"
	"github.com/codeexec/codeexec/server/tasks"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	// The sandbox supervisor is this same binary, re-executed.
	process.MaybeRunHelper()
	// Descriptors inherited without close-on-exec stay with the server:
	// no program it starts, in any mode, gets them.
	_ = process.CloseInheritedOnExec()
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr))
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, `codeexec %s: an MCP server that runs python, javascript and bash code in a sandbox.

Usage:
  codeexec [flags]
  codeexec approvals list|approve ID|deny ID   answer pending runs (see CODE_EXEC_APPROVAL)
  codeexec audit verify FILE                   check a CODE_EXEC_AUDIT_LOG file

Flags:
`, buildVersion())
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, `
Settings (environment variables):
`)
	configs.WriteHelp(w)
	fmt.Fprint(w, `
Examples:
  codeexec                                    # stdio, process mode (Claude Desktop, IDEs)
  CODE_EXEC_SANDBOX=docker codeexec --transport http --addr 127.0.0.1:8080
  KUBECONFIG=~/.kube/config CODE_EXEC_SANDBOX=kubernetes codeexec --transport http
`)
}

// run is main without the process exit, for tests.
func run(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "approvals":
			return approvalsCommand(args[1:], environ, stdout, stderr)
		case "audit":
			return auditCommand(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("codeexec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	transport := fs.String("transport", "", "transport: stdio, sse or http (overrides CODE_EXEC_TRANSPORT)")
	addr := fs.String("addr", "", "listen address of the sse and http transports (overrides CODE_EXEC_ADDR)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "codeexec: %v (see codeexec --help)\n", err)
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "codeexec", buildVersion())
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "codeexec: unexpected argument %q (see codeexec --help)\n", fs.Arg(0))
		return 2
	}

	cfg, err := configs.Load(environ)
	if err == nil && (*transport != "" || *addr != "") {
		if *transport != "" {
			err = cfg.Transport.UnmarshalText([]byte(*transport))
			if err != nil {
				err = fmt.Errorf("--transport %q is not valid: use stdio, sse or http", *transport)
			}
		}
		if *addr != "" {
			cfg.Addr = *addr
		}
		if err == nil {
			err = cfg.ValidateListen()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "codeexec: configuration error: %v\n", err)
		return 2
	}
	log := newLogger(cfg, stderr)
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// The metrics listener starts first, so that /readyz says 503 while
	// the sandbox starts (the image is probed, the pool warms).
	m, err := startMetrics(ctx, cfg, log)
	if err != nil {
		log.Error("cannot serve metrics", "err", err)
		fmt.Fprintf(stderr, "codeexec: %v\n", err)
		return 1
	}

	runner, err := newRunner(ctx, cfg, log)
	if err != nil {
		log.Error("cannot start the sandbox", "mode", cfg.Sandbox, "err", err)
		fmt.Fprintf(stderr, "codeexec: %v\n", err)
		return 1
	}
	sandboxRunner := runner
	// The sessions' backend is the mode's own (taken before any decorator).
	backend, _ := runner.(interface{ Sessions() sessions.Backend })
	pkgs, err := newPackages(ctx, cfg, runner, log)
	if err != nil {
		_ = runner.Close()
		log.Error("cannot start packages", "err", err)
		fmt.Fprintf(stderr, "codeexec: %v\n", err)
		return 1
	}
	if pkgs != nil {
		// Next to the sandbox: approval (outside) is asked before the
		// install phase, which takes a slot of the concurrency limit.
		runner = pkgs
		if backend != nil {
			backend = packagedSessions{pkgs, backend}
		}
	}
	if cfg.RestrictedPython() {
		// Inside the concurrency limit, next to the sandbox: the check runs
		// in the run's own interpreter.
		runner = pypolicy.Wrap(runner, cfg.PythonPolicyConfig())
	}
	limited := sandbox.Limit(m.Stage(metrics.StageStarted, runner), cfg.MaxConcurrency)
	var chain sandbox.Runner = limited
	defer func() {
		if err := chain.Close(); err != nil {
			log.Error("cleaning up the sandbox", "err", err)
		}
	}()
	announce(log, cfg, runner.Capabilities())
	watchReadiness(ctx, m, sandboxRunner)
	// Sessions end before the runner closes (defers run last first).
	manager := newSessions(cfg, backend, log)
	if manager != nil {
		defer func() { _ = manager.Shutdown() }()
	}

	// Approval is decided before a run takes a slot: Gate(Limit(runner)).
	gate, consoleURL, removeToken, err := newGate(ctx, cfg, envMap(environ), m.Stage(metrics.StageApproved, chain), m, log)
	defer removeToken()
	if err != nil {
		log.Error("cannot start approvals", "err", err)
		fmt.Fprintf(stderr, "codeexec: %v\n", err)
		return 1
	}
	if gate != nil {
		chain = gate
		if audit := gate.Audit(); audit != nil {
			defer func() {
				n, head := audit.Head()
				log.Info("audit log closed", "path", audit.Path(), "entries", n, "last_hash", head)
				_ = audit.Close()
			}()
		}
	}

	// Tasks run with contexts of their own: the store stops them (and
	// waits for their runs to be cleaned up) before the sandbox closes.
	taskRunTime := cfg.TaskMaxTimeout + cfg.ApprovalTimeout + time.Minute
	store := tasks.NewMemory(tasks.Config{
		// The run's own timeout is at most CODE_EXEC_TASK_MAX_TIMEOUT; the
		// store's limit also covers the approval and the queue.
		MaxRunTime:     taskRunTime,
		KeepResult:     cfg.TaskTTL,
		MaxClientTasks: cfg.MaxTasksPerClient,
		MaxBytes:       int64(cfg.MaxTaskBytes),
		MaxClientBytes: int64(cfg.MaxTaskBytesPerClient),
		OnChange: func(c map[tasks.Status]int) {
			counts := map[string]int{}
			for st, n := range c {
				counts[string(st)] = n
			}
			m.TaskStatuses(counts)
		},
	})
	defer func() { _ = store.Close() }()

	opts := serverOptions(cfg, log, consoleURL)
	if pkgs != nil {
		opts.Packages = pkgs
	}
	opts.Metrics, opts.Tasks, opts.TaskLifetime = m, store, taskRunTime+cfg.TaskTTL
	if manager != nil {
		opts.Sessions, opts.SessionIdleTimeout, opts.SessionSlots = manager, cfg.SessionIdleTimeout, limited.Share
	}
	srv := server.New(chain, opts)
	if cfg.Approval != approvals.PolicyNever {
		log.Info("approvals", "policy", cfg.Approval, "timeout", cfg.ApprovalTimeout, "elicitation", opts.Elicit, "console", consoleURL != "", "who_can_approve", srv.WhoCanApprove())
	}
	switch cfg.Transport {
	case configs.TransportStdio:
		err = srv.ServeStdio(ctx, stdin, stdout)
	default:
		err = srv.ServeHTTP(ctx, server.Transport(cfg.Transport), cfg.Addr, func(a net.Addr) {
			log.Info("listening", "transport", cfg.Transport, "addr", a.String(), "auth", cfg.AuthToken != "")
		})
	}
	if err != nil {
		log.Error("server stopped", "err", err)
		return 1
	}
	log.Info("shutting down")
	return 0
}

// serverOptions is what the MCP server needs of the configuration.
func serverOptions(cfg *configs.Config, log *slog.Logger, consoleURL string) server.Options {
	elicit, why := cfg.ElicitationCounts()
	return server.Options{
		Version:        buildVersion(),
		Logger:         log,
		Languages:      cfg.Languages,
		Limits:         cfg.Limits(cfg.Timeout),
		MaxTimeout:     cfg.MaxTimeout,
		MaxCode:        int64(cfg.MaxCode),
		MaxStdin:       int64(cfg.MaxStdin),
		MaxConcurrency: cfg.MaxConcurrency,
		Files:          artifacts.InputLimits{MaxFiles: cfg.MaxFiles, MaxTotalBytes: int64(cfg.MaxFilesBytes)},
		Artifacts:      artifacts.Options{MaxArtifacts: cfg.MaxArtifacts, MaxBytes: int64(cfg.MaxArtifactBytes)},
		Store:          artifacts.NewStore(cfg.ArtifactTTL, int64(cfg.ArtifactStore)),
		AuthToken:      cfg.AuthToken,
		AllowedOrigins: cfg.AllowedOrigins,
		Elicit:         elicit,
		ElicitReason:   why,
		ConsoleURL:     consoleURL,
		TaskMaxTimeout: cfg.TaskMaxTimeout,
	}
}

// newGate builds the approval gate around next, opens the audit log and
// starts the approvals console, when CODE_EXEC_APPROVAL or
// CODE_EXEC_AUDIT_LOG ask for them; otherwise it returns nil. consoleURL is
// where the console answers ("" without one). cleanup removes the admin
// token file the console's start wrote, if any; call it once the server is
// done.
func newGate(ctx context.Context, cfg *configs.Config, env map[string]string, next sandbox.Runner, m *metrics.Metrics, log *slog.Logger) (gate *approvals.Gate, consoleURL string, cleanup func(), err error) {
	cleanup = func() {}
	if cfg.Approval == approvals.PolicyNever && cfg.AuditLog == "" {
		return nil, "", cleanup, nil
	}
	var audit *approvals.AuditLog
	if cfg.AuditLog != "" {
		if audit, err = approvals.OpenAudit(cfg.AuditLog); err != nil {
			return nil, "", cleanup, fmt.Errorf("CODE_EXEC_AUDIT_LOG: %w", err)
		}
		n, head := audit.Head()
		log.Info("audit log", "path", cfg.AuditLog, "entries", n, "last_hash", head)
	}
	var (
		ln        net.Listener
		token     = cfg.AdminToken
		tokenFile string
	)
	if cfg.AdminEnabled() {
		if ln, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			_ = audit.Close()
			return nil, "", cleanup, fmt.Errorf("cannot serve the approvals console on CODE_EXEC_ADMIN_ADDR=%s: %w (choose another address, or off)", cfg.AdminAddr, err)
		}
		consoleURL = "http://" + ln.Addr().String() + "/"
		if token == "" {
			// The console and its API always need a token: make one that
			// this user's `codeexec approvals` finds in a private file.
			var explicit bool
			tokenFile, explicit, err = adminTokenFile(env, ln.Addr().String())
			if err == nil {
				token = newAdminToken()
				cleanup, err = writeAdminToken(tokenFile, explicit, token)
			}
			if err != nil {
				_ = ln.Close()
				_ = audit.Close()
				return nil, "", func() {}, fmt.Errorf("the approvals console needs a token: %w", err)
			}
		}
	}
	gate = approvals.NewGate(next, approvals.GateConfig{
		Policy: cfg.Approval, Timeout: cfg.ApprovalTimeout, Audit: audit, OutOfBand: ln != nil, Logger: log,
		RiskCheck:  riskCheck(cfg),
		OnDecision: func(d approvals.Decision) { m.ApprovalDecided(d.Outcome) },
	})
	m.SetApprovalsPending(func() int { p, _ := gate.Broker().Pending(); return len(p) })
	if ln != nil {
		admin := server.NewAdmin(gate, token, log)
		admin.AllowedOrigins = cfg.AllowedOrigins
		go func() {
			if err := admin.Serve(ctx, ln); err != nil {
				log.Error("approvals console stopped", "err", err)
			}
		}()
		if tokenFile != "" {
			log.Info("approvals console", "url", consoleURL, "token", "generated", "token_file", tokenFile, "login_url", consoleURL+"#token="+token)
		} else {
			log.Info("approvals console", "url", consoleURL, "token", "CODE_EXEC_ADMIN_TOKEN")
		}
	}
	return gate, consoleURL, cleanup, nil
}

// riskCheck is the approvals risk check: Assess, plus a note for the
// approver when the restricted Python policy will refuse the code anyway
// (a quick look on the server; the policy itself decides in the sandbox).
func riskCheck(cfg *configs.Config) func(language, code string) []approvals.Finding {
	if !cfg.RestrictedPython() {
		return approvals.Assess
	}
	policy := cfg.PythonPolicyConfig()
	return func(language, code string) []approvals.Finding {
		findings := approvals.Assess(language, code)
		if language != "python" {
			return findings
		}
		for _, f := range policy.Precheck(code) {
			findings = append(findings, approvals.Refused(f.Line, f.Detail))
		}
		return findings
	}
}

// envMap turns KEY=value pairs into a map.
func envMap(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

func newLogger(cfg *configs.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
	noColor := true
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			noColor = false
		}
	}
	return slog.New(tint.NewHandler(w, &tint.Options{Level: level, NoColor: noColor}))
}

func newRunner(ctx context.Context, cfg *configs.Config, log *slog.Logger) (sandbox.Runner, error) {
	// With CODE_EXEC_NETWORK=allowlist every mode gets the egress proxy;
	// with none (the default) no mode does, and runs have no network.
	var egressProxy *proxy.Proxy
	if policy, on := cfg.EgressPolicy(); on {
		egressProxy = proxy.New(policy, log.With("component", "egress"))
		log.Info("network allowlist", "allow", policy.Allow.Strings(), "allow_private", policy.AllowPrivate,
			"max_connections", policy.Caps.Connections, "max_bytes", cfg.NetworkMaxBytes.String())
		if policy.AllowPrivate {
			log.Warn("CODE_EXEC_NETWORK_ALLOW_PRIVATE=true: allowed names may resolve to loopback, private, link-local and cloud-metadata addresses, so runs can reach this host's services, its private network and, on a cloud host, the metadata service and the credentials it hands out")
		}
	}
	switch cfg.Sandbox {
	case sandbox.ModeDocker:
		cache, err := packagesCacheDir(cfg)
		if err != nil {
			return nil, err
		}
		return docker.New(ctx, docker.Config{Image: cfg.DockerImage, Runtime: cfg.DockerRuntime, Languages: cfg.Languages, Logger: log,
			PoolSize: cfg.DockerPoolSize, PoolLimits: cfg.Limits(cfg.Timeout), Egress: egressProxy, Workspace: cfg.WorkspaceConfig(), PackagesCache: cache})
	case sandbox.ModeProcess:
		disable, err := process.ParseFeatures(cfg.ProcessDisable)
		if err != nil {
			return nil, err
		}
		return process.New(ctx, process.Config{Languages: cfg.Languages, WorkRoot: cfg.WorkDir, Logger: log, Disable: disable, Strict: cfg.ProcessStrict,
			UIDRange: process.UIDRange{First: cfg.ProcessUIDRange.First, Last: cfg.ProcessUIDRange.Last}, PoolSize: cfg.ProcessPoolSize, Egress: egressProxy, Workspace: cfg.WorkspaceConfig()})
	case sandbox.ModeNone:
		return host.New(ctx, host.Config{Languages: cfg.Languages, WorkRoot: cfg.WorkDir, Logger: log, Egress: egressProxy, Workspace: cfg.WorkspaceConfig()})
	case sandbox.ModeKubernetes:
		return newKubernetes(ctx, cfg, log)
	}
	return nil, fmt.Errorf("unknown sandbox mode %q", cfg.Sandbox)
}

// newSessions makes the session Manager over the mode's session backend,
// or returns nil when sessions are off (CODE_EXEC_MAX_SESSIONS=0).
func newSessions(cfg *configs.Config, mode interface{ Sessions() sessions.Backend }, log *slog.Logger) *sessions.Manager {
	if cfg.MaxSessions == 0 || mode == nil {
		return nil
	}
	b := mode.Sessions()
	if cfg.RestrictedPython() {
		b = noPythonSessions{b}
	}
	log.Info("sessions", "max_sessions", cfg.MaxSessions, "idle_timeout", cfg.SessionIdleTimeout, "max_lifetime", cfg.SessionMaxLifetime)
	return sessions.New(sessions.Config{
		Backend: b, MaxSessions: cfg.MaxSessions,
		IdleTimeout: cfg.SessionIdleTimeout, MaxLifetime: cfg.SessionMaxLifetime, Logger: log,
	})
}

// noPythonSessions refuses python sessions: restricted Python
// (CODE_EXEC_PYTHON_POLICY=restricted) checks each program on its own
// before it runs, and a session's live interpreter would run code around
// that check. javascript and bash sessions are not affected.
type noPythonSessions struct{ next sessions.Backend }

func (b noPythonSessions) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	if spec.Language == "python" {
		return nil, fmt.Errorf("%w: python sessions are off with CODE_EXEC_PYTHON_POLICY=restricted, which checks each python program on its own; run python without a session_id", sandbox.ErrLanguageUnavailable)
	}
	return b.next.Start(ctx, spec)
}

// announce logs the mode, the languages and every protection at start, and
// warns loudly about what is unsafe.
func announce(log *slog.Logger, cfg *configs.Config, caps sandbox.Capabilities) {
	log.Info("codeexec starting", "version", buildVersion(), "sandbox", caps.Mode, "transport", cfg.Transport,
		"max_concurrency", cfg.MaxConcurrency, "timeout", cfg.Timeout, "max_timeout", cfg.MaxTimeout, "memory", cfg.Memory.String())
	for _, l := range caps.Languages {
		if l.Available {
			log.Info("language ready", "language", l.Name, "version", l.Version, "interpreter", l.Interpreter)
		} else {
			log.Warn("language unavailable", "language", l.Name, "reason", l.Reason)
		}
	}
	for _, p := range caps.Protections {
		log.Info("protection", "name", p.Name, "active", p.Active, "detail", p.Detail)
	}
	if w := caps.Workspace; w != nil {
		log.Info("workspace", "path", w.Path, "host_dir", w.HostDir, "writable", w.Writable, "enforced", w.Enforced, "detail", w.Detail)
	}
	for _, w := range caps.Warnings {
		log.Warn("!!! " + w + " !!!")
	}
	if caps.Mode == sandbox.ModeProcess {
		log.Warn("process mode is for trusted code on a developer machine or CI; use CODE_EXEC_SANDBOX=docker for untrusted code")
	}
}
