package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/server/principals"
)

// watchInterval is how often the principals file is looked at for changes.
const watchInterval = 2 * time.Second

// principalDefaults are the server-wide settings that principals fall back
// to and may not exceed. approvalAvailable says whether a person can be
// asked (the console is served, or clients' answers count).
func principalDefaults(cfg *configs.Config, approvalAvailable bool) principals.Defaults {
	d := principals.Defaults{
		Languages: cfg.Languages, Workspace: workspace(cfg), Packages: cfg.Packages, MaxSessions: cfg.MaxSessions,
		Approval: cfg.Approval, ApprovalAvailable: approvalAvailable, MaxTimeout: cfg.MaxTimeout,
		Memory: int64(cfg.Memory), CPUs: cfg.CPUs, MaxConcurrency: cfg.MaxConcurrency,
	}
	if cfg.Network == configs.NetworkAllowlist {
		d.Allowlist, _ = egress.ParseAllowlist(cfg.NetworkAllow)
	}
	return d
}

// approvalsNeeded reports whether runs may wait for a person: under
// CODE_EXEC_APPROVAL, or because a principal of the file (as it is at
// start) asks for approval. The approval gate is built, and the console
// served (unless CODE_EXEC_ADMIN_ADDR=off), only then; a reload that asks
// for approval on a server without them is refused.
func approvalsNeeded(cfg *configs.Config) (bool, error) {
	if cfg.Approval != approvals.PolicyNever || cfg.PrincipalsFile == "" {
		return cfg.Approval != approvals.PolicyNever, nil
	}
	data, err := os.ReadFile(cfg.PrincipalsFile)
	if err != nil {
		return false, fmt.Errorf("CODE_EXEC_PRINCIPALS_FILE %s: %w", cfg.PrincipalsFile, err)
	}
	list, err := principals.Parse(data, principalDefaults(cfg, true))
	if err != nil {
		return false, fmt.Errorf("CODE_EXEC_PRINCIPALS_FILE %s: %w", cfg.PrincipalsFile, err)
	}
	for _, p := range list {
		if p.Policy.Approval != approvals.PolicyNever {
			return true, nil
		}
	}
	return false, nil
}

// newPrincipals is the registry of who may call: the principals file's
// (CODE_EXEC_PRINCIPALS_FILE), or one principal with the server-wide
// settings: "default" for HTTP with CODE_EXEC_AUTH_TOKEN, "local"
// otherwise. gated says whether the chain has the approval gate
// (approvalsNeeded): a principal may ask for approval only where it has,
// and a person can be asked there (on the console, unless
// CODE_EXEC_ADMIN_ADDR=off, or through clients whose answers count).
// onReload sees each set of principals put in force.
func newPrincipals(cfg *configs.Config, gated bool, onReload func([]*principals.Principal), log *slog.Logger) (*principals.Registry, error) {
	elicit, _ := cfg.ElicitationCounts()
	d := principalDefaults(cfg, gated && (cfg.AdminListens() || elicit))
	switch {
	case cfg.PrincipalsFile != "":
		return principals.Load(principals.FileConfig{Path: cfg.PrincipalsFile, Defaults: d, Logger: log.With("component", "principals"), OnReload: onReload})
	case cfg.Transport != configs.TransportStdio && cfg.AuthToken != "":
		return principals.Token(principals.Builtin(principals.DefaultName, d), cfg.AuthToken, "CODE_EXEC_AUTH_TOKEN"), nil
	}
	return principals.Anonymous(principals.Builtin(principals.LocalName, d)), nil
}

// reloadPrincipals reloads the principals file on SIGHUP, and when it
// changes, until ctx ends. Runs in flight keep the principals they began
// with; a bad file keeps the principals in force (the registry says why).
func reloadPrincipals(ctx context.Context, reg *principals.Registry) {
	if reg.Path() == "" {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = reg.Reload()
			}
		}
	}()
	go reg.Watch(ctx, watchInterval)
}
