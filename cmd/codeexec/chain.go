package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/approvals/audit"
	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
	"github.com/codeexec/codeexec/sandbox/sessions"
	"github.com/codeexec/codeexec/server/metrics"
	"github.com/codeexec/codeexec/server/principals"
	"github.com/codeexec/codeexec/server/runtoken"
)

// chain is the runner chain, built once by buildChain: every request of
// every call (a run, a call in a session, a session's creation with
// packages) goes through runner, in this order (docs/architecture.md draws
// it), each layer there only when its concern is on:
//
//	metrics → principals → approval gate → audit → concurrency limit
//	        → session router → python policy → packages → run token
//	        → the mode's runner
//
// with the metrics' stage markers right inside the gate (approved) and
// the limit (started). The server calls the few parts it must call
// directly, gate and sessions, through its Options.
type chain struct {
	runner sandbox.Runner
	// guard holds each request to its principal's policy and limits.
	guard *principals.Guard
	// consoleOn: runs may wait for a person and the approvals console is
	// served (see approvalsNeeded).
	consoleOn bool
	// gate is the approval gate (nil with CODE_EXEC_APPROVAL=never).
	gate *approvals.Gate
	// record is the audit record (nil without a gate or
	// CODE_EXEC_AUDIT_LOG; without a log file it keeps the latest entries
	// for the console only).
	record *audit.Log
	// sessions is the session Manager (nil with CODE_EXEC_MAX_SESSIONS=0).
	sessions *sessions.Manager
	// pool is docker mode's warm pool (nil in other modes).
	pool func() metrics.PoolStats
	// packages is the packages layer (nil with CODE_EXEC_PACKAGES=false).
	packages *packages.Runner
}

// buildChain starts the mode's sandbox and builds the chain around it,
// bottom up; gated says whether runs may need approval (approvalsNeeded).
// m records the runs (nil records nothing). close undoes it.
func buildChain(ctx context.Context, cfg *configs.Config, gated bool, m *metrics.Metrics, log *slog.Logger) (*chain, error) {
	md, err := newMode(ctx, cfg, log)
	if err != nil {
		log.Error("cannot start the sandbox", "mode", cfg.Sandbox, "err", err)
		return nil, err
	}
	c := &chain{runner: md.runner, pool: md.pool, consoleOn: gated && cfg.AdminListens()}
	if err := c.addRunToken(cfg, log); err != nil {
		c.close(log)
		return nil, err
	}
	backend := md.sessions
	if err := c.addPackages(ctx, cfg, &backend, log); err != nil {
		c.close(log)
		return nil, err
	}
	c.addPythonPolicy(cfg, &backend)
	c.addSessions(cfg, backend, m, log)
	c.runner = sandbox.Limit(m.Stage(metrics.StageStarted, c.runner), cfg.MaxConcurrency)
	if err := c.addApprovals(cfg, gated, m, log); err != nil {
		c.close(log)
		return nil, err
	}
	c.guard = principals.NewGuard(c.runner)
	c.runner = m.Wrap(c.guard)
	return c, nil
}

// addRunToken puts the run token layer (CODE_EXEC_RUN_TOKEN_KEY) right in
// front of the mode's runner, whose runs must take its environment
// (sandbox.Capabilities.RunEnv).
func (c *chain) addRunToken(cfg *configs.Config, log *slog.Logger) error {
	if cfg.RunTokenKey == "" {
		return nil
	}
	caps := c.runner.Capabilities()
	if !caps.RunEnv {
		err := fmt.Errorf("CODE_EXEC_RUN_TOKEN_KEY is set, but %s mode cannot give runs an environment variable of their own yet, so its runs could get no token: unset it, or use docker or process mode", caps.Mode)
		log.Error("cannot start", "err", err)
		return err
	}
	signer, err := runtoken.NewSigner([]byte(cfg.RunTokenKey), cfg.RunTokenTTL)
	if err != nil {
		return fmt.Errorf("CODE_EXEC_RUN_TOKEN_KEY: %w", err)
	}
	log.Info("run tokens", "variable", runtoken.Variable, "ttl", cfg.RunTokenTTL, "algorithm", "HS256")
	if !caps.Isolation.Environment {
		log.Warn("!!! CODE_EXEC_RUN_TOKEN_KEY in " + string(caps.Mode) + " mode: runs see the server's environment, the key included, and can sign tokens of their own; use run tokens in docker or process mode !!!")
	}
	c.runner = runtoken.Wrap(c.runner, signer)
	return nil
}

// addPackages puts the packages layer (CODE_EXEC_PACKAGES=true) next to
// the sandbox, and gives the mode's sessions their packages: approval
// (outside) is asked before the install phase, which takes a run slot.
func (c *chain) addPackages(ctx context.Context, cfg *configs.Config, backend *sessions.Backend, log *slog.Logger) error {
	pkgs, err := newPackages(ctx, cfg, c.runner, log)
	if err != nil {
		log.Error("cannot start packages", "err", err)
		return err
	}
	if pkgs != nil {
		c.runner, c.packages = pkgs, pkgs
		*backend = pkgs.Sessions(*backend)
	}
	return nil
}

// addPythonPolicy puts restricted Python (CODE_EXEC_PYTHON_POLICY=restricted)
// inside the concurrency limit, next to the sandbox: the check runs in the
// run's own interpreter. Python sessions are refused under it.
func (c *chain) addPythonPolicy(cfg *configs.Config, backend *sessions.Backend) {
	if cfg.RestrictedPython() {
		c.runner = pypolicy.Wrap(c.runner, pythonPolicy(cfg))
		*backend = noPythonSessions{*backend}
	}
}

// addSessions puts the session router in front of the sandbox, with the
// Manager of the mode's sessions (unless CODE_EXEC_MAX_SESSIONS=0).
func (c *chain) addSessions(cfg *configs.Config, backend sessions.Backend, m *metrics.Metrics, log *slog.Logger) {
	if cfg.MaxSessions == 0 || backend == nil {
		return
	}
	log.Info("sessions", "max_sessions", cfg.MaxSessions, "idle_timeout", cfg.SessionIdleTimeout, "max_lifetime", cfg.SessionMaxLifetime)
	c.sessions = sessions.New(sessions.Config{
		Backend: backend, MaxSessions: cfg.MaxSessions,
		IdleTimeout: cfg.SessionIdleTimeout, MaxLifetime: cfg.SessionMaxLifetime, Logger: log,
		IDPrefix: idPrefix(cfg),
	})
	m.SetSessions(c.sessions.Count)
	c.runner = sessions.Route(c.sessions, c.runner)
}

// auditLogError is the start-up error of an audit log that audit.Open
// refused: the setting, what is wrong and what to do.
func auditLogError(path string, err error) error {
	var pe *fs.PathError
	if errors.Is(err, audit.ErrTampered) || !errors.As(err, &pe) {
		return fmt.Errorf("CODE_EXEC_AUDIT_LOG: %w", err) // it says what to do
	}
	user := "the server's user (uid " + strconv.Itoa(os.Geteuid()) + ")"
	var fix string
	switch fi, serr := os.Stat(path); {
	case serr == nil && fi.IsDir():
		return fmt.Errorf("CODE_EXEC_AUDIT_LOG=%s is a folder: name a file in it, such as %s", path, filepath.Join(path, "audit.jsonl"))
	case errors.Is(err, fs.ErrNotExist):
		fix = "create its folder (mkdir -p " + filepath.Dir(path) + ") or name a file in a folder that exists"
	case errors.Is(err, fs.ErrPermission):
		fix = user + " may not write there: name a file it may write, or change the permissions"
	default:
		fix = "name a file that " + user + " may create and append to"
	}
	return fmt.Errorf("CODE_EXEC_AUDIT_LOG=%s cannot be opened: %v; %s", path, pe.Err, fix)
}

// addApprovals puts the audit record (CODE_EXEC_AUDIT_LOG) and the approval
// gate (when runs may need approval: CODE_EXEC_APPROVAL other than never,
// or a principal that asks) in front of the concurrency limit: approval is
// decided before a run takes a slot. The gate records its requests and
// decisions in the audit layer, which records the runs; without a log file
// the record keeps the latest entries for the console.
func (c *chain) addApprovals(cfg *configs.Config, gated bool, m *metrics.Metrics, log *slog.Logger) error {
	if !gated && cfg.AuditLog == "" {
		return nil
	}
	record, err := audit.Open(cfg.AuditLog)
	if err != nil {
		err = auditLogError(cfg.AuditLog, err)
		log.Error("cannot open the audit log", "err", err)
		return err
	}
	if cfg.AuditLog != "" {
		n, head := record.Head()
		log.Info("audit log", "path", cfg.AuditLog, "entries", n, "last_hash", head)
	}
	c.record = record
	rec := audit.Wrap(c.runner, record, log)
	c.runner = rec
	if !gated {
		return nil
	}
	c.gate = approvals.NewGate(m.Stage(metrics.StageApproved, c.runner), approvals.GateConfig{
		Policy: cfg.Approval, Timeout: cfg.ApprovalTimeout, Record: rec, OutOfBand: c.consoleOn, Logger: log,
		IDPrefix: idPrefix(cfg), Key: []byte(cfg.ApprovalKey),
		RiskCheck:  riskCheck(cfg),
		OnDecision: func(d approvals.Decision) { m.ApprovalDecided(d.Outcome) },
	})
	m.SetApprovalsPending(func() int { p, _ := c.gate.Broker().Pending(); return len(p) })
	c.runner = c.gate
	return nil
}

// riskCheck is the approvals risk check: Assess, plus a note for the
// approver when the restricted Python policy will refuse the code anyway
// (a quick look on the server; the policy itself decides in the sandbox).
func riskCheck(cfg *configs.Config) func(language, code string) []approvals.Finding {
	if !cfg.RestrictedPython() {
		return approvals.Assess
	}
	policy := pythonPolicy(cfg)
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

// close ends the sessions, then closes the chain (pending approvals are
// withdrawn, the sandbox stops), then the audit log, whose last entry it
// logs. It is safe on a chain that buildChain left half built.
func (c *chain) close(log *slog.Logger) {
	if c.sessions != nil {
		_ = c.sessions.Shutdown()
	}
	if err := c.runner.Close(); err != nil {
		log.Error("cleaning up the sandbox", "err", err)
	}
	if c.record != nil {
		if path := c.record.Path(); path != "" {
			n, head := c.record.Head()
			log.Info("audit log closed", "path", path, "entries", n, "last_hash", head)
		}
		_ = c.record.Close()
	}
}
