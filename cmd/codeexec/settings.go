package main

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/docker/image"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
)

// The domain values that the settings describe, built where they are used
// (configs is plain data).

// checkSettings builds the values that only their own package can check,
// and returns the first that it refuses as a configuration error naming
// the setting. configure calls it right after configs.Load.
func checkSettings(cfg *configs.Config) error {
	if _, err := uidRange(cfg); err != nil {
		return err
	}
	// The principals file is read again, with the rest, when the server
	// starts (and on each reload).
	if err := cfg.ValidatePrincipals(); err != nil {
		return err
	}
	if err := cfg.ValidatePeers(); err != nil {
		return err
	}
	if _, err := approvalsNeeded(cfg); err != nil {
		return err
	}
	return nil
}

// dockerConfig is what every docker.Runner of the server shares: the
// sandbox image, how a missing one is fetched, and the runtime.
func dockerConfig(cfg *configs.Config) docker.Config {
	return docker.Config{Image: cfg.DockerImage, BaseImage: cfg.DockerBaseImage, Pull: image.Policy(cfg.DockerPull), Runtime: cfg.DockerRuntime}
}

// runLimits are the operator's limits of one run with timeout.
func runLimits(cfg *configs.Config, timeout time.Duration) sandbox.Limits {
	return sandbox.Limits{
		Timeout:       timeout,
		MemoryBytes:   int64(cfg.Memory),
		CPUs:          cfg.CPUs,
		Processes:     cfg.Pids,
		OpenFiles:     cfg.OpenFiles,
		FileSizeBytes: int64(cfg.FileSize),
		OutputBytes:   int64(cfg.MaxOutput),
	}
}

// workspace is the project folder every run sees (CODE_EXEC_WORKSPACE),
// or nil for none.
func workspace(cfg *configs.Config) *sandbox.Workspace {
	if cfg.Workspace == "" {
		return nil
	}
	return &sandbox.Workspace{Dir: filepath.Clean(cfg.Workspace), Writable: cfg.WorkspaceMode == "rw"}
}

// uidRange is the range of host users of process mode's runs
// (CODE_EXEC_PROCESS_UID_RANGE), or the configuration error that names the
// setting when process mode refuses it.
func uidRange(cfg *configs.Config) (process.UIDRange, error) {
	r := process.UIDRange{First: cfg.ProcessUIDRange.First, Last: cfg.ProcessUIDRange.Last}
	if err := r.Validate(); err != nil {
		return r, configs.Invalid("ProcessUIDRange", cfg.ProcessUIDRange, err.Error())
	}
	return r, nil
}

// pythonPolicy is the restricted-Python policy of the settings
// (CODE_EXEC_PYTHON_ALLOWED_IMPORTS, CODE_EXEC_PYTHON_MAX_AST_NODES).
func pythonPolicy(cfg *configs.Config) pypolicy.Policy {
	return pypolicy.Policy{AllowedImports: cfg.PythonAllowedImports, MaxASTNodes: cfg.PythonMaxASTNodes}
}

// egressPolicy is the egress proxy's policy, or false with
// CODE_EXEC_NETWORK=none. Names not in CODE_EXEC_NETWORK_RESOLVE are
// resolved by the system's resolver.
func egressPolicy(cfg *configs.Config) (egress.Policy, bool) {
	if cfg.Network != configs.NetworkAllowlist {
		return egress.Policy{}, false
	}
	allow, _ := egress.ParseAllowlist(cfg.NetworkAllow)
	return egress.Policy{
		Allow:        allow,
		AllowPrivate: cfg.NetworkAllowPrivate,
		Resolver:     resolver(cfg),
		Caps: egress.Caps{
			Connections:    cfg.NetworkMaxConnections,
			Bytes:          int64(cfg.NetworkMaxBytes),
			ConnectTimeout: cfg.NetworkConnectTimeout,
			IdleTimeout:    cfg.NetworkIdleTimeout,
		},
	}, true
}

// resolver resolves the names of CODE_EXEC_NETWORK_RESOLVE to their
// addresses, and the others with the system's resolver.
func resolver(cfg *configs.Config) egress.Resolver {
	pins, _ := egress.ParsePins(cfg.NetworkResolve)
	return egress.PinnedResolver{Pins: pins, Next: egress.SystemResolver()}
}

// packagesCache is the package cache folder: CODE_EXEC_PACKAGES_CACHE_DIR,
// or codeexec-packages-UID in the system temporary directory.
func packagesCache(cfg *configs.Config) string {
	if cfg.PackagesCacheDir != "" {
		return cfg.PackagesCacheDir
	}
	return filepath.Join(os.TempDir(), "codeexec-packages-"+strconv.Itoa(os.Geteuid()))
}

// packagesIndex names the indexes of the install phase.
func packagesIndex(cfg *configs.Config) packages.Index {
	return packages.Index{PipURL: cfg.PipIndexURL, NpmURL: cfg.NpmRegistry}
}

// packagesPolicy is the egress policy of the install phase: the index
// host:ports, the destinations of CODE_EXEC_PACKAGES_ALLOW, and nothing
// else (see packages.IndexPolicy).
func packagesPolicy(cfg *configs.Config) (egress.Policy, error) {
	pol, err := packages.IndexPolicy([]string{cfg.PipIndexURL, cfg.NpmRegistry}, resolver(cfg), packages.DefaultCaps)
	if err != nil || len(cfg.PackagesAllow) == 0 {
		return pol, err
	}
	pol.Allow, err = egress.ParseAllowlist(append(pol.Allow.Strings(), cfg.PackagesAllow...))
	return pol, err
}

// packagesLimits are the limits of one install phase: the run limits with
// CODE_EXEC_PACKAGES_TIMEOUT, the file-size limit raised to
// CODE_EXEC_PACKAGES_MAX_BYTES, at least 1 GiB of memory, 256 processes and
// 4096 open files (pip and npm need more than a small program), and 1 MiB
// of output (of which an error keeps the tail).
func packagesLimits(cfg *configs.Config) sandbox.Limits {
	l := runLimits(cfg, cfg.PackagesTimeout)
	l.FileSizeBytes = int64(cfg.PackagesMaxBytes)
	l.MemoryBytes = max(l.MemoryBytes, 1<<30)
	l.Processes = max(l.Processes, 256)
	l.OpenFiles = max(l.OpenFiles, 4096)
	l.OutputBytes = 1 << 20
	return l
}
