package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/process"
)

// newPackages wraps runner in the packages layer (CODE_EXEC_PACKAGES=true):
// its install phase runs in a second runner of the same mode whose egress
// proxy lets it reach the package indexes and nothing else. It returns nil
// with packages off. Closing the layer closes runner and the install runner.
func newPackages(ctx context.Context, cfg *configs.Config, runner sandbox.Runner, log *slog.Logger) (*packages.Runner, error) {
	if !cfg.Packages {
		return nil, nil
	}
	log = log.With("component", "packages")
	policy, err := packagesPolicy(cfg)
	if err != nil {
		return nil, fmt.Errorf("CODE_EXEC_PACKAGES: %w", err)
	}
	cache, err := packages.OpenCache(packagesCache(cfg), int64(cfg.PackagesCacheBytes), int64(cfg.PackagesMaxBytes))
	if err != nil {
		return nil, fmt.Errorf("CODE_EXEC_PACKAGES_CACHE_DIR: %w", err)
	}
	var langs []string
	for _, l := range []string{"python", "javascript"} {
		if slices.Contains(cfg.Languages, l) {
			langs = append(langs, l)
		}
	}
	if len(langs) == 0 {
		return nil, fmt.Errorf("CODE_EXEC_PACKAGES=true needs python or javascript in CODE_EXEC_LANGUAGES")
	}
	indexProxy := proxy.New(policy, log.With("component", "packages-egress"))
	var install sandbox.Runner
	switch cfg.Sandbox {
	case sandbox.ModeDocker:
		// The install containers are locked down like run containers
		// (no warm pool: each install is a container of its own); the
		// engine binds the cache's folders, so it must be local.
		dc := dockerConfig(cfg)
		dc.Languages, dc.Logger, dc.Egress = langs, log, indexProxy
		install, err = docker.New(ctx, dc)
	case sandbox.ModeProcess:
		disable, perr := process.ParseFeatures(cfg.ProcessDisable)
		if perr != nil {
			return nil, perr
		}
		uids, uerr := uidRange(cfg)
		if uerr != nil {
			return nil, uerr
		}
		install, err = process.New(ctx, process.Config{Languages: langs, WorkRoot: cfg.WorkDir, Logger: log, Disable: disable, Strict: cfg.ProcessStrict,
			UIDRange: uids, Egress: indexProxy})
	case sandbox.ModeNone:
		install, err = host.New(ctx, host.Config{Languages: langs, WorkRoot: cfg.WorkDir, Logger: log, Egress: indexProxy})
	}
	if err != nil {
		return nil, fmt.Errorf("the install phase of CODE_EXEC_PACKAGES=true cannot start: %w", err)
	}
	layer := packages.Wrap(runner, packages.Config{
		Cache:           cache,
		Installer:       &packages.RunnerInstaller{Runner: install, Index: packagesIndex(cfg), Limits: packagesLimits(cfg)},
		Index:           packagesIndex(cfg),
		InstallAllow:    policy.Allow.Strings(),
		InstallTimeout:  cfg.PackagesTimeout,
		MaxInstallBytes: int64(cfg.PackagesMaxBytes),
		Logger:          log,
	})
	st := cache.Stats()
	log.Warn("!!! CODE_EXEC_PACKAGES=true: code_execute installs the packages a request names, from the index the operator chose; their code then runs in the sandbox like the program itself (installs run in the same sandbox and reach only the index) !!!",
		"pip_index_url", cfg.PipIndexURL, "npm_registry", cfg.NpmRegistry, "install_allow", policy.Allow.Strings(),
		"cache_dir", st.Dir, "cache_entries", st.Entries, "cache_bytes", st.Bytes, "cache_max_bytes", st.MaxBytes, "install_timeout", cfg.PackagesTimeout)
	return layer, nil
}

// packagesCacheDir makes the package cache folder for docker mode's run
// containers, which see it read-only (CODE_EXEC_PACKAGES=true), and
// returns it; "" with packages off.
func packagesCacheDir(cfg *configs.Config) (string, error) {
	if !cfg.Packages {
		return "", nil
	}
	dir := packagesCache(cfg)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("CODE_EXEC_PACKAGES_CACHE_DIR: %w", err)
	}
	return dir, nil
}
