package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
	"github.com/codeexec/codeexec/sandbox/sessions"
	"github.com/codeexec/codeexec/server/metrics"
)

// mode is the sandbox of CODE_EXEC_SANDBOX: the Runner at the end of the
// runner chain, the backend of its sessions, and, in docker and kubernetes
// mode, its warm pool's statistics (nil in the other modes).
type mode struct {
	runner   sandbox.Runner
	sessions sessions.Backend
	pool     func() metrics.PoolStats
}

// newMode starts the sandbox of cfg.Sandbox. With CODE_EXEC_NETWORK=allowlist
// every mode gets the egress proxy; with none (the default) no mode does,
// and runs have no network.
func newMode(ctx context.Context, cfg *configs.Config, log *slog.Logger) (mode, error) {
	var egressProxy *proxy.Proxy
	if policy, on := egressPolicy(cfg); on {
		egressProxy = proxy.New(policy, log.With("component", "egress"))
		log.Info("network allowlist", "allow", policy.Allow.Strings(), "allow_private", policy.AllowPrivate,
			"max_connections", policy.Caps.Connections, "max_bytes", cfg.NetworkMaxBytes.String())
		pins, _ := egress.ParsePins(cfg.NetworkResolve)
		for _, w := range egress.NeverReached(policy.Allow, policy.AllowPrivate, pins) {
			log.Warn(w)
		}
		if policy.AllowPrivate {
			log.Warn("CODE_EXEC_NETWORK_ALLOW_PRIVATE=true: allowed names may resolve to loopback, private, link-local and cloud-metadata addresses, so runs can reach this host's services, its private network and, on a cloud host, the metadata service and the credentials it hands out")
		}
	}
	switch cfg.Sandbox {
	case sandbox.ModeDocker:
		cache, err := packagesCacheDir(cfg)
		if err != nil {
			return mode{}, err
		}
		pool := cfg.DockerPoolSize
		if cfg.RunTokenKey != "" && pool > 0 {
			// Each run's container is created with its token: warm
			// containers would wait for nothing.
			log.Info("docker mode's warm pool is off: with CODE_EXEC_RUN_TOKEN_KEY each run's container is created with its token", "CODE_EXEC_DOCKER_POOL_SIZE", pool)
			pool = 0
		}
		dc := dockerConfig(cfg)
		dc.Languages, dc.Logger, dc.PoolSize, dc.PoolLimits = cfg.Languages, log, pool, runLimits(cfg, cfg.Timeout)
		dc.Egress, dc.Workspace, dc.PackagesCache = egressProxy, workspace(cfg), cache
		r, err := docker.New(ctx, dc)
		if err != nil {
			return mode{}, err
		}
		stats := func() metrics.PoolStats {
			st := r.PoolStats()
			return metrics.PoolStats{Ready: st.Ready, Hits: st.Hits, Misses: st.Misses}
		}
		return mode{runner: r, sessions: r.Sessions(), pool: stats}, nil
	case sandbox.ModeProcess:
		disable, err := process.ParseFeatures(cfg.ProcessDisable)
		if err != nil {
			return mode{}, err
		}
		uids, err := uidRange(cfg)
		if err != nil {
			return mode{}, err
		}
		pcfg := process.Config{Languages: cfg.Languages, WorkRoot: cfg.WorkDir, Logger: log, Disable: disable, Strict: cfg.ProcessStrict,
			UIDRange: uids, PoolSize: cfg.ProcessPoolSize, PoolLimits: runLimits(cfg, cfg.Timeout), Egress: egressProxy, Workspace: workspace(cfg)}
		if cfg.RestrictedPython() {
			// Every python run imports the checker's modules and begins
			// with the checker: interpreters started ahead do both first.
			pcfg.PythonPreload, pcfg.PythonPrelude = pypolicy.Imports, pypolicy.Prelude()
		}
		pcfg.Helper = runHelper(log)
		r, err := process.New(ctx, pcfg)
		if err != nil {
			return mode{}, err
		}
		return mode{runner: r, sessions: r.Sessions()}, nil
	case sandbox.ModeNone:
		r, err := host.New(ctx, host.Config{Languages: cfg.Languages, WorkRoot: cfg.WorkDir, Logger: log, Egress: egressProxy, Workspace: workspace(cfg)})
		if err != nil {
			return mode{}, err
		}
		return mode{runner: r, sessions: r.Sessions()}, nil
	case sandbox.ModeKubernetes:
		return newKubernetes(ctx, cfg, log, egressProxy)
	}
	return mode{}, fmt.Errorf("unknown sandbox mode %q", cfg.Sandbox)
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

// runHelper is process mode's run helper beside this binary (see
// process.FindHelper), or "" to start this binary for every run; it logs
// which, and why a helper that is there is not used.
func runHelper(log *slog.Logger) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	path, why := process.FindHelper(exe)
	switch {
	case path != "":
		log.Info("run helper", "path", path)
	case why != "":
		log.Warn("the run helper beside codeexec is not used: every run starts codeexec itself, which costs each run about 8 ms more CPU", "why", why)
	default:
		log.Debug("no run helper beside codeexec: every run starts codeexec itself", "helper", process.HelperName)
	}
	return path
}
