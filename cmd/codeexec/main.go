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
	"maps"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/process"
	// Runs process mode's run helpers (see commands) before the server's
	// packages initialize, when this binary was started as one of them.
	_ "github.com/codeexec/codeexec/sandbox/process/early"
	"github.com/codeexec/codeexec/server"
	"github.com/codeexec/codeexec/server/metrics"
	"github.com/codeexec/codeexec/server/principals"
	"github.com/codeexec/codeexec/server/tasks"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	// Process mode's helpers run before anything else, with the descriptors
	// they were started with (package early runs them sooner still).
	if len(os.Args) > 1 {
		if c, ok := commands[os.Args[1]]; ok && c.internal {
			os.Exit(c.run(nil, nil, nil, nil))
		}
	}
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
`, buildVersion())
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		if c := commands[name]; !c.internal {
			fmt.Fprintf(w, "  %-44s %s\n", "codeexec "+name+" "+c.args, c.help)
		}
	}
	fmt.Fprint(w, `
Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, `
Settings (environment variables; a CODE_EXEC_* name that is none stops the server):
`)
	configs.WriteHelp(w)
	fmt.Fprint(w, `
Examples:
  codeexec                                    # stdio, process mode (Claude Desktop, IDEs)
  CODE_EXEC_SANDBOX=docker codeexec --transport http --addr 127.0.0.1:8080
  KUBECONFIG=~/.kube/config CODE_EXEC_SANDBOX=kubernetes codeexec --transport http
`)
}

// run is main without the process exit, for tests: a subcommand, or the
// server. A name that looks like a setting but is none stops the server
// (configs.Load refuses it); a subcommand, which reads few settings and
// may run in any shell, warns about it on stderr and goes on.
func run(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if c, ok := commands[args[0]]; ok {
			if err := configs.CheckNames(environ); !c.internal && err != nil {
				fmt.Fprintf(stderr, "codeexec %s: warning: %v\n", args[0], err)
			}
			return c.run(args[1:], environ, stdout, stderr)
		}
	}
	cfg, status := configure(args, environ, stdout, stderr)
	if cfg == nil {
		return status
	}
	log := newLogger(cfg, stderr)
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, cfg, envMap(environ), stdin, stdout, stderr, log)
}

// configure reads the flags and the environment: the configuration, or nil
// and the exit status (0 after --help or --version, 2 for a bad flag or
// setting, said in one line on stderr).
func configure(args, environ []string, stdout, stderr io.Writer) (*configs.Config, int) {
	fs := flag.NewFlagSet("codeexec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	transport := fs.String("transport", "", "transport: stdio, sse or http (overrides CODE_EXEC_TRANSPORT)")
	addr := fs.String("addr", "", "listen address of the sse and http transports (overrides CODE_EXEC_ADDR)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return nil, 0
		}
		fmt.Fprintf(stderr, "codeexec: %v (see codeexec --help)\n", err)
		return nil, 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "codeexec", buildVersion())
		return nil, 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "codeexec: unexpected argument %q (see codeexec --help)\n", fs.Arg(0))
		return nil, 2
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
	if err == nil {
		err = checkSettings(cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "codeexec: configuration error: %v\n", err)
		return nil, 2
	}
	return cfg, 0
}

// serve starts everything, serves MCP on the configured transport until
// ctx ends or the transport fails, and stops everything again; it returns
// the exit status. A part that cannot start stops the server with its
// error on stderr.
func serve(signal context.Context, cfg *configs.Config, env map[string]string, stdin io.Reader, stdout, stderr io.Writer, log *slog.Logger) int {
	// signal ends at SIGTERM or SIGINT; ctx, the life of every part, ends
	// then over stdio, and after the drain over HTTP (CODE_EXEC_DRAIN_TIMEOUT),
	// during which /readyz already says 503.
	drain := cfg.DrainTimeout
	if cfg.Transport == configs.TransportStdio {
		drain = 0
	}
	ctx, stop := context.WithCancel(context.WithoutCancel(signal))
	defer stop()
	if drain <= 0 {
		ctx, stop = context.WithCancel(signal)
		defer stop()
	}
	failed := func(err error) int {
		fmt.Fprintf(stderr, "codeexec: %v\n", err)
		return 1
	}
	// The metrics listener starts first, so that /readyz says 503 while
	// the sandbox starts (the image is probed, the pool warms).
	m, err := startMetrics(ctx, cfg, log)
	if err != nil {
		log.Error("cannot serve metrics", "err", err)
		return failed(err)
	}
	// Who may call, before the sandbox starts: a file that is refused
	// stops the server at once.
	gated, err := approvalsNeeded(cfg)
	if err != nil {
		return failed(err)
	}
	var guard *principals.Guard
	reg, err := newPrincipals(cfg, gated, func(l []*principals.Principal) {
		if guard != nil {
			guard.Reloaded(l)
		}
	}, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return failed(err)
	}
	c, err := buildChain(ctx, cfg, gated, m, log)
	if err != nil {
		return failed(err)
	}
	defer c.close(log)
	guard = c.guard
	announce(log, cfg, c.runner.Capabilities())
	watchReadiness(signal, m, c.pool)
	reloadPrincipals(ctx, reg)
	reps := newReplicas(cfg, log)
	consoleURL, removeToken, err := startConsole(ctx, cfg, c.consoleOn, env, c.gate, c.record, reps, log)
	defer removeToken()
	if err != nil {
		log.Error("cannot start approvals", "err", err)
		return failed(err)
	}
	// Tasks run with contexts of their own: the store stops them (and
	// waits for their runs to be cleaned up) before the chain closes.
	store, taskLifetime := newTaskStore(cfg, m)
	defer func() { _ = store.Close() }()

	opts := serverOptions(cfg, log, consoleURL)
	opts.Progress, opts.Tasks, opts.TaskLifetime, opts.Principals = m, store, taskLifetime, reg
	opts.Replicas = reps
	if c.packages != nil {
		opts.Packages = c.packages
	}
	if c.sessions != nil {
		opts.Sessions, opts.SessionIdleTimeout = c.sessions, cfg.SessionIdleTimeout
	}
	if c.gate != nil {
		opts.Approvals = c.gate
	}
	runs := &inFlight{Runner: c.runner}
	srv := server.New(runs, opts)
	go drainThenStop(signal, ctx, srv, runs, drain, stop, log)
	if c.gate != nil {
		log.Info("approvals", "policy", cfg.Approval, "timeout", cfg.ApprovalTimeout, "elicitation", opts.Elicit, "console", consoleURL != "", "who_can_approve", srv.WhoCanApprove())
	}
	if err := listen(ctx, cfg, srv, stdin, stdout, log); err != nil {
		log.Error("server stopped", "err", err)
		return 1
	}
	log.Info("shutting down")
	return 0
}

// listen serves srv on the configured transport until ctx ends.
func listen(ctx context.Context, cfg *configs.Config, srv *server.Server, stdin io.Reader, stdout io.Writer, log *slog.Logger) error {
	if cfg.Transport == configs.TransportStdio {
		return srv.ServeStdio(ctx, stdin, stdout)
	}
	return srv.ServeHTTP(ctx, server.Transport(cfg.Transport), cfg.Addr, func(a net.Addr) {
		log.Info("listening", "transport", cfg.Transport, "addr", a.String(), "auth", cfg.AuthToken != "" || cfg.PrincipalsFile != "")
	})
}

// newTaskStore is the store of MCP tasks, whose counts m records, and how
// long a 2025-11-25 task is kept from its creation.
func newTaskStore(cfg *configs.Config, m *metrics.Metrics) (*tasks.Memory, time.Duration) {
	// The run's own timeout is at most CODE_EXEC_TASK_MAX_TIMEOUT; the
	// store's limit also covers the approval and the queue.
	runTime := cfg.TaskMaxTimeout + cfg.ApprovalTimeout + time.Minute
	store := tasks.NewMemory(tasks.Config{
		MaxRunTime:     runTime,
		KeepResult:     cfg.TaskTTL,
		MaxClientTasks: cfg.MaxTasksPerClient,
		MaxBytes:       int64(cfg.MaxTaskBytes),
		MaxClientBytes: int64(cfg.MaxTaskBytesPerClient),
		IDPrefix:       idPrefix(cfg),
		OnChange: func(c map[tasks.Status]int) {
			counts := map[string]int{}
			for st, n := range c {
				counts[string(st)] = n
			}
			m.TaskStatuses(counts)
		},
	})
	return store, runTime + cfg.TaskTTL
}

// serverOptions is what the MCP server needs of the configuration.
func serverOptions(cfg *configs.Config, log *slog.Logger, consoleURL string) server.Options {
	elicit, why := cfg.ElicitationCounts()
	return server.Options{
		Version:        buildVersion(),
		Logger:         log,
		Languages:      cfg.Languages,
		Limits:         runLimits(cfg, cfg.Timeout),
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
		AuditLog:       cfg.AuditLog,
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
