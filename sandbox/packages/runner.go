package packages

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// Config configures the packages layer.
type Config struct {
	Cache     *Cache
	Installer Installer
	// Index is what sandbox_info reports as the indexes.
	Index Index
	// InstallAllow is what sandbox_info reports as the install phase's
	// reachable destinations (its egress allowlist).
	InstallAllow []string
	// InstallTimeout is the wall-clock cap of one install phase.
	InstallTimeout time.Duration
	// MaxInstallBytes caps the size of one installed list.
	MaxInstallBytes int64
	Logger          *slog.Logger
}

// Info is what sandbox_info says of packages.
type Info struct {
	Enabled               bool        `json:"enabled"`
	PipIndexURL           string      `json:"pip_index_url,omitempty"`
	NpmRegistry           string      `json:"npm_registry,omitempty"`
	InstallAllow          []string    `json:"install_allow,omitempty" jsonschema:"the destinations the install phase may reach (the index hosts, and CODE_EXEC_PACKAGES_ALLOW)"`
	InstallTimeoutSeconds float64     `json:"install_timeout_seconds,omitempty"`
	MaxInstallBytes       int64       `json:"max_install_bytes,omitempty"`
	MaxPackages           int         `json:"max_packages,omitempty"`
	Cache                 *CacheStats `json:"cache,omitempty"`
	Detail                string      `json:"detail"`
}

// Runner is the packages layer: a sandbox.Runner that, for a Request with
// Packages, installs them (or finds them in the cache) and runs the
// request in next with the installed folder as its read-only PackageDir.
// A Request without Packages goes to next untouched.
type Runner struct {
	next sandbox.Runner
	cfg  Config
	log  *slog.Logger
}

var _ sandbox.Runner = (*Runner)(nil)

// Wrap returns the packages layer around next. Closing it closes next and
// the installer.
func Wrap(next sandbox.Runner, cfg Config) *Runner {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{next: next, cfg: cfg, log: log}
}

// Capabilities are next's.
func (r *Runner) Capabilities() sandbox.Capabilities { return r.next.Capabilities() }

// Close closes next, and the Installer when it is an io.Closer.
func (r *Runner) Close() error {
	err := r.next.Close()
	if c, ok := r.cfg.Installer.(io.Closer); ok {
		err = errors.Join(err, c.Close())
	}
	return err
}

// Info describes the configuration and the cache.
func (r *Runner) Info() *Info {
	st := r.cfg.Cache.Stats()
	return &Info{
		Enabled: true, PipIndexURL: r.cfg.Index.PipURL, NpmRegistry: r.cfg.Index.NpmURL, InstallAllow: r.cfg.InstallAllow,
		InstallTimeoutSeconds: r.cfg.InstallTimeout.Seconds(), MaxInstallBytes: r.cfg.MaxInstallBytes, MaxPackages: MaxSpecs,
		Cache:  &st,
		Detail: "code_execute's packages argument is installed in an install phase whose only reachable destination is the index, cached by (interpreter, language, exact list), and given to the run read-only at " + sandbox.PackagesPath + "; the run itself has the usual network policy",
	}
}

// Identity is what a cache entry of lang is bound to besides the list:
// the mode, the interpreter's path and its version.
func Identity(caps sandbox.Capabilities, lang string) string {
	l, _ := caps.Language(lang)
	return string(caps.Mode) + "\x00" + l.Interpreter + "\x00" + l.Version
}

// Prepare returns the installed folder of specs for lang, installing them
// first when the cache has not got them, and the function that releases
// it (call it once the run is over). hit says whether the cache had them.
// Sessions use it to give a session the folder.
func (r *Runner) Prepare(ctx context.Context, lang string, specs []string) (dir string, release func(), hit bool, err error) {
	specs, err = Parse(lang, specs)
	if err != nil {
		return "", nil, false, err
	}
	key := Key(Identity(r.next.Capabilities(), lang), lang, specs)
	start := time.Now()
	dir, release, hit, err = r.cfg.Cache.Acquire(ctx, key, func(ctx context.Context, dir string) error {
		r.log.Info("installing packages", "language", lang, "packages", specs, "key", key)
		// The install has a context of its own: other calls may be
		// waiting for it, and the cache removes its folder if it stops.
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.InstallTimeout+30*time.Second)
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		return r.cfg.Installer.Install(ictx, lang, specs, dir)
	})
	if err != nil {
		r.log.Info("packages not installed", "language", lang, "packages", specs, "err", err)
		return "", nil, false, err
	}
	r.log.Info("packages ready", "language", lang, "packages", specs, "cached", hit, "ms", time.Since(start).Milliseconds())
	return dir, release, hit, nil
}

// Run implements sandbox.Runner.
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if len(req.Packages) == 0 {
		return r.next.Run(ctx, req)
	}
	start := time.Now()
	dir, release, hit, err := r.Prepare(ctx, req.Language, req.Packages)
	if err != nil {
		return nil, err
	}
	defer release()
	rep := &sandbox.PackagesReport{Cached: hit}
	if !hit {
		rep.InstallMS = float64(time.Since(start).Microseconds()) / 1000
	}
	rep.List, _ = Parse(req.Language, req.Packages)
	req.PackageDir = packageDir(dir)
	res, err := r.next.Run(ctx, req)
	if res != nil {
		res.Packages = rep
	}
	return res, err
}

// packageDir is the read-only package folder of a run or session.
func packageDir(dir string) *sandbox.PackageDir { return &sandbox.PackageDir{HostDir: dir} }
