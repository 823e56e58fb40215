// Package process is the sandbox backend for mode process: each run is a
// child process in a fresh work directory, with a scrubbed environment,
// kernel resource limits, its own process group and a supervisor that kills
// every process the run started when it ends.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/datascience"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// Config configures a process-mode Runner.
type Config struct {
	// Languages are the enabled canonical language names.
	Languages []string
	// WorkRoot is where run directories are made ("" means os.TempDir()).
	WorkRoot string
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// Disable turns kernel isolation features off (CODE_EXEC_PROCESS_DISABLE),
	// for example "network" for code that must reach the network.
	Disable []Feature
	// Strict refuses to start unless every isolation feature is active
	// (CODE_EXEC_PROCESS_STRICT).
	Strict bool
	// UIDRange are the host users that runs take, one per run in flight,
	// when the server is root (CODE_EXEC_PROCESS_UID_RANGE); the zero value
	// means DefaultUIDRange.
	UIDRange UIDRange
	// Egress, when set, is the proxy through which runs reach the network
	// (CODE_EXEC_NETWORK=allowlist). Each run's network namespace then has
	// one way out: a listener on EgressAddr inside it, served by Egress.
	// It needs the network namespace: New fails without one.
	Egress *proxy.Proxy
	// Workspace is the operator's project folder that every run sees
	// (CODE_EXEC_WORKSPACE); nil for none. With a mount namespace runs see
	// it at sandbox.WorkspacePath, without one at its own path.
	Workspace *sandbox.Workspace
	// PoolSize is how many runs are prepared ahead of demand
	// (CODE_EXEC_PROCESS_POOL_SIZE), per language and limits that requests
	// ask for, more while back-to-back requests find none waiting: their
	// host user, cgroups and directories taken and their supervisor
	// started, waiting, with the interpreter of python and javascript
	// started in the run's sandbox and loaded. 0 prepares none; Linux
	// only.
	PoolSize int
	// PoolLimits are the limits of the runs prepared from the start (the
	// server's defaults); the zero value prepares supervisors alone until
	// requests say which limits they ask for.
	PoolLimits sandbox.Limits
	// PythonPreload are python modules that an interpreter started ahead
	// imports while it waits for its run: those that every run imports
	// (restricted Python's checker's), never a run's own.
	PythonPreload []string
	// PythonPrelude is python source, whole lines, that the programs of
	// this server begin with (restricted Python's checker): an interpreter
	// started ahead compiles it while it waits, and a program that begins
	// with it has only the rest compiled.
	PythonPrelude string
	// Helper is process mode's run helper (see FindHelper), which every
	// run's supervisor and exec stage start from instead of this binary;
	// "" starts this binary.
	Helper string
}

// EgressAddr is where a run's programs find the egress proxy, inside the
// run's own network namespace (HTTP_PROXY and HTTPS_PROXY point there).
const EgressAddr = "127.0.0.1:3128"

// Runner runs code as supervised child processes.
type Runner struct {
	interp   map[string]sandbox.Interpreter
	caps     sandbox.Capabilities
	root     string
	workRoot *executor.WorkRoot
	cred     *executor.Credential
	log      *slog.Logger
	runs     *executor.RunGroup
	// iso is the isolation every run gets (RootDir is filled per run).
	iso executor.Isolation
	// features says, for each isolation feature, whether it is active and
	// why not.
	features []sandbox.Protection
	// shield says how the server is kept out of the runs' reach.
	shield sandbox.Protection
	// uids hands out the runs' host users (root only; nil otherwise).
	uids *uidPool
	// sharedUID, with uid-range turned off under root, holds the shared
	// lock on the one run user's id (see shareUID) until Close.
	sharedUID *os.File
	// uidRange is the configured range of run users.
	uidRange UIDRange
	// cgroups makes the runs' cgroups (nil where the host allows none).
	cgroups *cgroupManager
	egress  *proxy.Proxy
	runSeq  atomic.Int64
	// python is the environment python runs use (the figure hook), or nil.
	python *datascience.Env
	// workspace is the operator's project folder, or nil.
	workspace *executor.Bind
	// workspaceWarning names entries of the workspace that runs cannot
	// read ("" for none).
	workspaceWarning string
	// pool holds runs prepared ahead of demand (nil: none).
	pool *warmPool
	// seatbelt applies a Seatbelt profile to each program (macOS; nil
	// elsewhere, and where the start-up probe failed).
	seatbelt *seatbeltRuns
	// envPath is the PATH of the programs (programPath).
	envPath string
	// pythonAhead is what a python interpreter started ahead prepares while it
	// waits.
	pythonAhead pythonAhead
	// preloading says whether interpreters start ahead of their runs:
	// only where runs are kept apart (see protections), since a waiting
	// interpreter that other runs could reach would let them reach the
	// run it is to serve.
	preloading bool
}

var _ sandbox.Runner = (*Runner)(nil)

// New resolves the interpreters of the enabled languages on executor.MinimalPath (the
// PATH that sandboxed code sees), prepares the work root and checks which
// protections this host supports.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Helper != "" {
		// The probes below start supervisors too.
		executor.UseHelper(cfg.Helper)
	}
	wr, err := executor.NewWorkRoot(cfg.WorkRoot, "codeexec-", 0o711, log)
	if err != nil {
		return nil, err
	}
	root := wr.Dir
	interp, langs := sandbox.ResolveInterpreters(ctx, cfg.Languages, executor.MinimalPath)
	r := &Runner{interp: interp, root: root, workRoot: wr, log: log, egress: cfg.Egress, envPath: programPath(interp)}
	uids := cfg.UIDRange
	if uids == (UIDRange{}) {
		uids = DefaultUIDRange
	}
	r.uidRange = uids
	if err := uids.Validate(); err != nil {
		_ = wr.Remove()
		return nil, fmt.Errorf("process mode: CODE_EXEC_PROCESS_UID_RANGE: %w", err)
	}
	if os.Geteuid() == 0 && runtime.GOOS == "linux" {
		// Until a run takes a user of its own (the uid range), the probes
		// run as the range's first.
		r.cred = &executor.Credential{UID: uint32(uids.First), GID: uint32(uids.First)}
	}
	if os.Geteuid() == 0 {
		if err := checkTraversable(root); err != nil {
			_ = wr.Remove()
			return nil, fmt.Errorf("process mode: the sandbox users (uids %s) cannot reach the work root: %w; set CODE_EXEC_WORK_DIR to a directory whose parents are world-searchable", uids, err)
		}
	}
	r.runs = executor.NewRunGroup()
	var pkgs []sandbox.Package
	if in, ok := interp["python"]; ok && runtime.GOOS != "windows" {
		// (On Windows python runs as it is: no figure hook.)
		r.python, pkgs = executor.PreparePython(ctx, root, in, log)
	}
	runUsers, err := r.setUpRunUsers(ctx, cfg.Disable, uids)
	if err != nil {
		_ = wr.Remove()
		return nil, err
	}
	r.iso, r.features = r.probeIsolation(ctx, cfg.Disable, uids.First)
	if r.python != nil {
		// Bound after the private /tmp, like the run directory: the work
		// root is often in /tmp.
		r.iso.Binds = append(r.iso.Binds, executor.Bind{Src: r.python.Dir, Dst: r.python.Dir})
	}
	var ws *sandbox.WorkspaceStatus
	if cfg.Workspace != nil {
		if ws, err = r.setWorkspace(*cfg.Workspace); err != nil {
			_ = wr.Remove()
			return nil, err
		}
	}
	if r.iso.User && r.cred != nil {
		// A user namespace maps the run to its host user already.
		r.cred = nil
	}
	r.features = append(r.features, runUsers, r.setUpCgroups(ctx, cfg.Disable))
	if r.egress != nil && !r.iso.Network && (r.seatbelt == nil || r.seatbelt.network) {
		_ = wr.Remove()
		if runtime.GOOS == "darwin" {
			return nil, fmt.Errorf("%w: CODE_EXEC_NETWORK=allowlist needs process mode's Seatbelt profile without CODE_EXEC_PROCESS_DISABLE=network, and it is not in force (%s)", sandbox.ErrSandboxUnavailable, featureStatus(r.features, FeatureSeatbelt))
		}
		return nil, fmt.Errorf("%w: CODE_EXEC_NETWORK=allowlist needs process mode's network namespace, which is unavailable (%s)", sandbox.ErrSandboxUnavailable, featureStatus(r.features, FeatureNetwork))
	}
	if cfg.Strict {
		if err := r.checkStrict(); err != nil {
			r.closeCgroups()
			_ = wr.Remove()
			return nil, err
		}
	}
	for i := range langs {
		if langs[i].Name == "python" {
			langs[i].Packages = pkgs
		}
	}
	r.caps = r.capabilities(langs, ws)
	if err := r.probeLanguages(ctx); err != nil {
		r.closeCgroups()
		_ = wr.Remove()
		return nil, err
	}
	r.pythonAhead = pythonAhead{modules: slices.Clone(cfg.PythonPreload), prelude: cfg.PythonPrelude}
	if err := r.pythonAhead.check(); err != nil {
		r.closeCgroups()
		_ = wr.Remove()
		return nil, fmt.Errorf("process mode: %w", err)
	}
	r.preloading = r.uids != nil || r.iso.PID && r.iso.User
	// The compiled prelude is shared by every run: it must be read-only to
	// them, as a read-only bind, under Landlock or to another user.
	if py, ok := r.interp["python"]; ok && r.preloading && cfg.PoolSize > 0 && (r.iso.Mount || r.iso.Landlock || r.uids != nil) {
		dir := filepath.Join(root, "ahead")
		if err := r.pythonAhead.compile(ctx, py.Path, dir); err != nil {
			log.Warn("the python prelude is compiled by each interpreter started ahead, not once", "err", err)
		}
		if r.pythonAhead.compiled != "" {
			r.iso.Binds = append(r.iso.Binds, executor.Bind{Src: dir, Dst: dir})
		}
	}
	if cfg.PoolSize > 0 && runtime.GOOS == "linux" {
		r.pool = newWarmPool(r, cfg.PoolSize, r.poolKeys(cfg.PoolLimits))
	}
	return r, nil
}

// poolKeys are the prepared runs wanted from the start with the limits
// lim: an interpreter started ahead for each available language that has
// one, a supervisor alone for the others; none for the zero limits.
func (r *Runner) poolKeys(lim sandbox.Limits) []poolKey {
	if lim == (sandbox.Limits{}) {
		return nil
	}
	var keys []poolKey
	for _, l := range r.caps.Languages {
		if !l.Available {
			continue
		}
		k := r.poolKey(sandbox.Request{Language: l.Name, Limits: lim})
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// checkStrict refuses, for CODE_EXEC_PROCESS_STRICT, a host where a
// protection is unavailable, naming each.
func (r *Runner) checkStrict() error {
	var missing []string
	for _, f := range r.features {
		if !f.Active {
			missing = append(missing, f.Name+" ("+f.Detail+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: CODE_EXEC_PROCESS_STRICT=true but these protections are unavailable: %s", sandbox.ErrSandboxUnavailable, strings.Join(missing, "; "))
	}
	return nil
}

// capabilities are what sandbox_info says of this Runner: the isolation
// and protections in force, the languages langs, the workspace ws (nil for
// none) and the egress policy.
func (r *Runner) capabilities(langs []sandbox.LanguageStatus, ws *sandbox.WorkspaceStatus) sandbox.Capabilities {
	caps := sandbox.Capabilities{
		Mode:        sandbox.ModeProcess,
		Isolation:   r.isolation(),
		Summary:     r.isolationSummary(),
		Languages:   langs,
		Protections: r.protections(),
		Workspace:   ws,
		RunEnv:      true,
	}
	if ws != nil && !ws.Enforced {
		caps.Warnings = append(caps.Warnings, "CODE_EXEC_WORKSPACE_MODE=ro is not enforced on this host: "+ws.Detail)
	}
	if r.workspaceWarning != "" {
		caps.Warnings = append(caps.Warnings, r.workspaceWarning)
	}
	if r.egress != nil {
		proxyAddr := EgressAddr
		if !r.iso.Network {
			proxyAddr = "127.0.0.1, on a port of each run's own (HTTP_PROXY names it)"
		}
		caps.Egress = r.egress.Policy().Info(true, proxyAddr)
	}
	return caps
}

// probeLimits bound the start-up probes: the defaults of a run, so that an
// interpreter that starts under them starts in a run too.
var probeLimits = sandbox.Limits{Timeout: 10 * time.Second, MemoryBytes: 256 << 20, CPUs: 1, Processes: 64, OpenFiles: 256, FileSizeBytes: 1 << 20, OutputBytes: 64 << 10}

// probeLanguages runs an empty program of every available language through
// Run, the path every request takes, with the isolation chosen at start. A
// language whose program fails is marked unavailable with the reason, so
// that sandbox_info never lists as runnable what cannot run; when no
// language can run at all, the server must not start.
func (r *Runner) probeLanguages(ctx context.Context) error {
	type outcome struct {
		lang string
		err  error
	}
	var avail []string
	for _, l := range r.caps.Languages {
		if l.Available {
			avail = append(avail, l.Name)
		}
	}
	if len(avail) == 0 {
		return nil
	}
	results := make(chan outcome, len(avail))
	for _, lang := range avail {
		go func() {
			res, err := r.Run(ctx, sandbox.Request{Language: lang, Limits: probeLimits})
			if err == nil && res.ExitCode != 0 {
				msg := strings.TrimSpace(res.Stderr)
				if msg == "" {
					msg = fmt.Sprintf("exit code %d", res.ExitCode)
				}
				err = fmt.Errorf("an empty program failed: %s", msg)
			}
			results <- outcome{lang, err}
		}()
	}
	var failed []string
	for range avail {
		o := <-results
		if o.err == nil {
			continue
		}
		failed = append(failed, o.lang+": "+o.err.Error())
		delete(r.interp, o.lang)
		for i, l := range r.caps.Languages {
			if l.Name == o.lang {
				r.caps.Languages[i].Available = false
				r.caps.Languages[i].Reason = "cannot run in this sandbox on this host: " + o.err.Error()
			}
		}
		r.log.Warn("language unavailable: its start-up probe failed", "language", o.lang, "err", o.err)
	}
	if len(failed) == len(avail) {
		return fmt.Errorf("%w: process mode cannot run any language on this host (%s)", sandbox.ErrSandboxUnavailable, strings.Join(failed, "; "))
	}
	return nil
}

// setWorkspace makes the operator's project folder part of every run and
// says how runs see it: at sandbox.WorkspacePath through a bind in the
// run's mount namespace, or else at its own path, where Landlock (when
// active) keeps a read-only workspace read-only.
func (r *Runner) setWorkspace(w sandbox.Workspace) (*sandbox.WorkspaceStatus, error) {
	fi, err := os.Stat(w.Dir)
	if err != nil || !fi.IsDir() || !filepath.IsAbs(w.Dir) {
		return nil, fmt.Errorf("process mode: the workspace %q is not an absolute path to a folder (CODE_EXEC_WORKSPACE): %v", w.Dir, err)
	}
	users := runUsers{uidRange: os.Geteuid() == 0 && runtime.GOOS == "linux", rng: r.uidRange}
	// A root server's runs resolve the path themselves in a user
	// namespace, or without a mount namespace; an ordinary user's always.
	users.parents = !users.uidRange || r.iso.User || !r.iso.Mount
	if err := users.checkWorkspace(w); err != nil {
		return nil, err
	}
	r.workspaceWarning = users.unreadableBelow(w.Dir)
	b := executor.Bind{Src: w.Dir, Dst: sandbox.WorkspacePath, Writable: w.Writable}
	r.workspace = &b
	r.iso.Binds = append(r.iso.Binds, b)
	st := &sandbox.WorkspaceStatus{Path: r.iso.Path(b), HostDir: w.Dir, Writable: w.Writable, Enforced: true}
	mode := ifElse(w.Writable, "read-write", "read-only")
	switch {
	case r.iso.Mount:
		st.Detail = "bound " + mode + " at " + sandbox.WorkspacePath + " in each run's mount namespace" + ifElse(w.Writable, "", " (mounts below it are not carried over)")
	case r.iso.Landlock:
		st.Detail = "no mount namespace: runs see it at its own path, " + mode + " by a Landlock rule"
	case r.seatbelt != nil:
		st.Detail = "runs see it at its own path, " + mode + " by the Seatbelt profile"
	default:
		st.Enforced = w.Writable
		st.Detail = "no mount namespace and no Landlock: runs see it at its own path, with their user's permissions only"
	}
	return st, nil
}

// checkTraversable reports a parent of dir that others cannot search.
func checkTraversable(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by other users (mode %v)", d, st.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func (r *Runner) protections() []sandbox.Protection {
	p := []sandbox.Protection{
		{Name: "scrubbed environment", Active: true, Detail: "PATH=" + r.envPath + ", HOME and " + ifElse(runtime.GOOS == "windows", "TEMP", "TMPDIR") + " in the run directory; nothing of the server's environment"},
		{Name: "fresh work directory", Active: true, Detail: "created under " + r.root + " for each run and removed afterwards"},
		{Name: "timeout and output cap", Active: true},
	}
	p = append(p, platformProtections()...)
	switch {
	case r.iso.User:
		p = append(p, sandbox.Protection{Name: "unprivileged user", Active: true, Detail: fmt.Sprintf("code runs as uid %d in a user namespace of its own, with no uid 0 to become and no capability, as host user %s", executor.ProgramUID, r.hostUsers())})
	case r.cred != nil:
		p = append(p, sandbox.Protection{Name: "unprivileged user", Active: true, Detail: fmt.Sprintf("code runs as host user %s, not as root", r.hostUsers())})
	case runtime.GOOS == "windows":
		p = append(p, sandbox.Protection{Name: "unprivileged user", Active: false, Detail: "code runs as the server's own Windows user, with its rights (an administrator's server gives its runs an administrator's rights)"})
	default:
		p = append(p, sandbox.Protection{Name: "unprivileged user", Active: false, Detail: fmt.Sprintf("the server is not root and has no user namespace, so code runs as the server's own user (uid %d)", os.Geteuid())})
	}
	p = append(p, r.shield)
	p = append(p, r.features...)
	net := sandbox.Protection{Name: "network isolation", Active: r.iso.Network, Detail: "no network but an isolated loopback"}
	if r.egress != nil {
		net.Detail = "an isolated loopback whose only way out is codeexec's egress proxy at " + EgressAddr + " (CODE_EXEC_NETWORK=allowlist)"
	}
	switch {
	case r.iso.Network:
	case r.seatbelt != nil && !r.seatbelt.network && r.egress != nil:
		net.Active, net.Detail = true, "the Seatbelt profile refuses every connection but one, to codeexec's egress proxy on a loopback port of the run's own (CODE_EXEC_NETWORK=allowlist); no other port of the host, no DNS"
	case r.seatbelt != nil && !r.seatbelt.network:
		net.Active, net.Detail = true, "the Seatbelt profile refuses every connection, the host's loopback and Unix sockets included, and name resolution"
	default:
		net.Detail = "code can reach the network like any program of its user (" + r.unavailable(FeatureNetwork) + ")"
	}
	fs := sandbox.Protection{Name: "filesystem isolation", Active: r.iso.Mount || r.iso.Landlock, Detail: "only system directories (read-only) and the run directory are visible"}
	switch {
	case r.iso.Mount:
	case r.iso.Landlock:
		// Landlock governs opening files, not looking them up.
		fs.Detail = "only system directories (read-only) and the run directory can be opened; other paths can still be looked up (names and attributes), not read or written"
	case r.seatbelt != nil:
		fs.Active, fs.Detail = true, "the Seatbelt profile lets code read only the system's folders, the interpreters' installations, the run directory and the workspace, and write only the run directory (and a read-write workspace); the folders above those can be looked up, not listed"
	default:
		fs.Detail = "code can read what its user can read (" + r.unavailable(FeatureMount) + ")"
	}
	work := sandbox.Protection{Name: "work directory cap", Active: r.iso.Mount, Detail: fmt.Sprintf("the run directory is a tmpfs of its own in the run's mount namespace, capped like /tmp: at the file-size limit (CODE_EXEC_FILE_SIZE) and %d files", executor.TmpfsInodes)}
	if !r.iso.Mount {
		work.Detail = "the run directory is on the host's disk, and only each file's size is limited: a run can fill the disk (needs the mount namespace: " + ifElse(runtime.GOOS == "linux", featureStatus(r.features, FeatureMount), "needs Linux") + ")"
	}
	apart := sandbox.Protection{Name: "runs kept apart"}
	switch {
	case r.uids != nil:
		apart.Active, apart.Detail = true, "each run in flight is a host user of its own"+ifElse(r.iso.PID, " and sees only its own processes", "")
	case r.iso.PID && r.iso.User:
		apart.Active, apart.Detail = true, fmt.Sprintf("runs share the server's host user (uid %d), but each sees and signals only its own processes (PID namespace) and may hold at most 32 inotify instances (its user namespace's limit)", os.Geteuid())
	case runtime.GOOS == "windows":
		apart.Detail = "runs share the server's Windows user: each is a Job Object of its own, but they can see each other's processes and end them with that user's rights"
	default:
		apart.Detail = fmt.Sprintf("runs share one host user (uid %d) and, without PID and user namespaces, can signal each other's processes and exhaust per-user kernel limits (inotify, processes) for each other", os.Geteuid())
	}
	return append(p, net, fs, work, apart)
}

// hostUsers names the host users that runs are.
func (r *Runner) hostUsers() string {
	switch {
	case r.uids != nil:
		return "from the uid range " + r.uidRange.String()
	case r.iso.User:
		return strconv.Itoa(r.iso.UID) + ifElse(r.iso.UID == os.Geteuid(), " (the server's own user)", "")
	case r.cred != nil:
		return strconv.Itoa(int(r.cred.UID))
	}
	return strconv.Itoa(os.Geteuid())
}

// unavailable says why the protection of feature f (the network or the
// mount namespace) is not in force: the feature's status on Linux, the
// Seatbelt profile's on macOS.
func (r *Runner) unavailable(f Feature) string {
	switch runtime.GOOS {
	case "darwin":
		return "the Seatbelt profile: " + featureStatus(r.features, FeatureSeatbelt)
	case "windows":
		return "process mode on Windows isolates neither files nor the network: docker mode with Docker Desktop does"
	}
	return featureStatus(r.features, f)
}

// featureStatus is the detail recorded for feature f.
func featureStatus(ps []sandbox.Protection, f Feature) string {
	for _, p := range ps {
		if p.Name == protectionName(f) {
			return p.Detail
		}
	}
	return "unavailable"
}

// protectionName is how sandbox_info names an isolation feature.
func protectionName(f Feature) string {
	switch f {
	case FeatureLandlock:
		return "landlock"
	case FeatureSeccomp:
		return "seccomp filter"
	case FeatureCgroup:
		return "memory cgroup"
	case FeatureUIDRange:
		return "separate run users"
	case FeatureSeatbelt:
		return "seatbelt profile"
	}
	return string(f) + " namespace"
}

// isolation declares what the protections in force keep runs from: the
// same facts as the "network isolation", "filesystem isolation" and
// "unprivileged user" protections and the PID namespace.
func (r *Runner) isolation() sandbox.Isolation {
	return sandbox.Isolation{
		Network:     r.iso.Network || (r.seatbelt != nil && !r.seatbelt.network),
		Filesystem:  r.iso.Mount || r.iso.Landlock || r.seatbelt != nil,
		Identity:    r.iso.User || r.cred != nil,
		Environment: true,
		Processes:   r.iso.PID,
	}
}

// isolationSummary says in one line what separates a run from the host.
func (r *Runner) isolationSummary() string {
	var on []string
	for _, f := range Features {
		if hasFeature(r.iso, f) {
			on = append(on, protectionName(f))
		}
	}
	if r.cgroups != nil {
		on = append(on, protectionName(FeatureCgroup))
	}
	if r.uids != nil {
		on = append(on, protectionName(FeatureUIDRange))
	}
	if r.seatbelt != nil {
		on = append(on, protectionName(FeatureSeatbelt))
	}
	s := "child process: scrubbed environment, resource limits, own process group, fresh work directory"
	if len(on) > 0 {
		s += "; kernel isolation: " + strings.Join(on, ", ")
	}
	return s
}

func ifElse(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// Capabilities returns what this runner offers on this host.
func (r *Runner) Capabilities() sandbox.Capabilities { return r.caps }

// Run runs req in a fresh work directory and removes it afterwards.
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	spec, in, err := sandbox.Lookup(req.Language, r.interp, r.caps.Languages)
	if err != nil {
		return nil, err
	}
	if err := sandbox.CheckFiles(req.Language, req.Files); err != nil {
		return nil, err
	}
	// Close stops runs in flight too.
	ctx, end, err := r.runs.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	s, err := r.takeSlot(ctx, req)
	if err != nil {
		return nil, err
	}
	res, err := r.runIn(ctx, s, req, spec, in)
	if errors.Is(err, executor.ErrNotBegun) {
		// Its supervisor was killed while it waited for this request, or
		// its interpreter started ahead died: start one on demand.
		if r.pool != nil {
			r.pool.notBegun(s)
		}
		if s, err = r.newSlot(ctx, req.Limits, true); err != nil {
			return nil, err
		}
		res, err = r.runIn(ctx, s, req, spec, in)
	}
	return res, err
}

// runIn runs req in slot s, and gives s back: in the background, once the
// result is known (the run's directories, cgroups and host user outlive
// no process of it; Close waits for them). It must be called within a run
// of r.runs.
func (r *Runner) runIn(ctx context.Context, s *slot, req sandbox.Request, spec sandbox.LanguageSpec, in sandbox.Interpreter) (*sandbox.Result, error) {
	clean := false
	var reaped chan struct{}
	defer func() {
		r.runs.Go(func() {
			if reaped != nil {
				<-reaped // the supervisor, which is the run's user, has exited
			}
			s.end(clean)
		})
	}()
	file, err := s.writeProgram(spec.FileName, programText(req.Language, req.Code))
	if err != nil {
		return nil, err
	}
	dir, g := s.dir, s.g
	before, err := executor.WriteFiles(dir, req.Files, s.owner)
	if err != nil {
		return nil, err
	}
	res := &sandbox.Result{Sandbox: sandbox.ModeProcess}
	var part *proxy.Part
	var serve func(net.Listener)
	if r.egress != nil {
		part, serve = proxy.NewPart(r.egress, fmt.Sprintf("process-%d", r.runSeq.Add(1)), req.Network)
		defer func() { res.Network = part.Close() }()
	}
	var run executor.Spec
	if s.spec != nil {
		// The interpreter started ahead with this Spec: the request
		// brings its limits (the same, but the output cap), its input,
		// its environment and its part of the egress proxy.
		run = *s.spec
		run.Limits, run.EgressServe, run.Preload = req.Limits, serve, preloadMessage(req.Env)
	} else if run, err = r.programSpec(g, s.isolation(), executor.ProgramOf(req, spec, in.Path, dir, file, serve)); err != nil {
		return nil, err
	}
	run.Stdin, run.Observe = req.Stdin, req.Observe
	reaped = make(chan struct{})
	run.Reaped = reaped
	// With a mount namespace the run directory is the run's own tmpfs, a
	// copy of the host's: its supervisor collects the artifacts there.
	if req.Artifacts != nil && run.Isolation.Mount {
		run.Collect = executor.NewCollectSpec(spec.FileName, *req.Artifacts)
	}
	if s.prep != nil {
		err = executor.SpawnPrepared(ctx, s.prep, run, res)
	} else {
		err = executor.Spawn(ctx, run, res)
	}
	g.finish(res)
	clean = err == nil
	if err != nil {
		return res, err
	}
	if req.Artifacts != nil && run.Collect == nil {
		res.Artifacts = executor.CollectArtifacts(dir, spec.FileName, before, *req.Artifacts)
	}
	return res, nil
}

// programSpec is the Spec of a program of process mode, one-off run or
// session, under guard g (its host user and cgroups) with isolation iso:
// the scrubbed environment with thread pools sized to the CPU limit,
// WORKSPACE, the package folder bound in, python's figure hook
// (plt.show() saves the figures) and the egress listener.
func (r *Runner) programSpec(g *runGuard, iso executor.Isolation, p executor.Program) (executor.Spec, error) {
	iso.TmpBytes = p.Limits.FileSizeBytes
	path, env := p.Path, append(minimalEnv(p.Dir, r.envPath), executor.ThreadEnv(p.Limits.CPUs)...)
	if r.workspace != nil {
		env = append(env, sandbox.WorkspaceVariable+"="+iso.Path(*r.workspace))
	}
	if pd := p.Packages; pd != nil {
		if uid, gid, ok := g.owner(); pd.Writable && ok {
			// The install phase writes as the run's user.
			if err := os.Chown(pd.HostDir, uid, gid); err != nil {
				return executor.Spec{}, fmt.Errorf("%w: handing the package folder to the sandbox user: %v", sandbox.ErrSandboxUnavailable, err)
			}
		}
		b := executor.Bind{Src: pd.HostDir, Dst: sandbox.PackagesPath, Writable: pd.Writable}
		iso.Binds = append(slices.Clip(iso.Binds), b)
		env = append(env, sandbox.PackageEnv(p.Lang, iso.Path(b))...)
	}
	if p.Lang == "python" && r.python != nil {
		path, env = r.python.Python, executor.PythonEnv(env, r.python)
	}
	var egressAddr string
	serve, proxyPort := p.Serve, 0
	switch {
	case p.Serve == nil:
	case !iso.Network && r.seatbelt != nil:
		// No network namespace to listen in: the server listens on a
		// loopback port of the run's own, the one its profile lets it
		// reach.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return executor.Spec{}, fmt.Errorf("%w: listening for the run's egress proxy: %v", sandbox.ErrSandboxUnavailable, err)
		}
		p.Serve(ln)
		serve, proxyPort = nil, ln.Addr().(*net.TCPAddr).Port
		env = append(env, egress.ProxyEnv(ln.Addr().String())...)
	default:
		env, egressAddr = append(env, egress.ProxyEnv(EgressAddr)...), EgressAddr
	}
	env = sandbox.WithEnv(env, p.Env)
	var profile string
	if r.seatbelt != nil {
		var err error
		if profile, err = r.seatbelt.profile(iso, p.Dir, proxyPort); err != nil {
			return executor.Spec{}, fmt.Errorf("%w: the run's Seatbelt profile: %v", sandbox.ErrSandboxUnavailable, err)
		}
	}
	return executor.Spec{
		Seatbelt:            profile,
		EgressAddr:          egressAddr,
		EgressServe:         serve,
		Isolation:           iso,
		Path:                path,
		Args:                append(interpreterArgs(p.Lang, p.Limits), p.Args...),
		Env:                 env,
		Dir:                 p.Dir,
		Limits:              p.Limits,
		Rlimits:             true,
		NoAddressSpaceLimit: g.cg != nil || p.Lang == "javascript",
		AddressSpaceExtra:   addressSpaceExtra(p.Lang),
		Credential:          g.cred,
		NoNewPrivs:          true,
		CgroupProcs:         g.cgroupProcs(),
	}, nil
}

// takeSlot returns a prepared run when one is ready for req (with the
// request's limits set on the cgroups of a supervisor alone; an
// interpreter started ahead has them already), or makes a slot on demand.
func (r *Runner) takeSlot(ctx context.Context, req sandbox.Request) (*slot, error) {
	if r.pool != nil {
		if s := r.pool.take(ctx, r.poolKey(req)); s != nil {
			if s.spec != nil || s.g.cg == nil {
				return s, nil
			}
			if err := s.g.cg.setLimits(req.Limits); err == nil {
				return s, nil
			}
			s.end(true)
		}
	}
	return r.newSlot(ctx, req.Limits, true)
}

// poolKey is the key of the prepared run that suits req: an interpreter of
// its language started ahead for its limits, when interpreters start ahead
// here, its language has one and req can run on it (no packages, no
// variable the interpreter reads as it starts); a supervisor alone
// otherwise.
func (r *Runner) poolKey(req sandbox.Request) poolKey {
	if !r.preloading || !slices.Contains(preloadLanguages, req.Language) || req.PackageDir != nil || !lateEnv(req.Env) {
		return poolKey{}
	}
	return keyOf(req.Language, req.Limits)
}

// makeRootDir makes the empty directory on which a run's minimal root is
// mounted (inside the run's own mount namespace only).
func (r *Runner) makeRootDir(iso executor.Isolation) (string, error) {
	dir, err := os.MkdirTemp(r.root, "root-")
	if err != nil {
		return "", fmt.Errorf("%w: creating the root directory: %v", sandbox.ErrSandboxUnavailable, err)
	}
	if iso.User {
		if err := os.Chown(dir, iso.UID, iso.GID); err != nil {
			return "", fmt.Errorf("%w: %v", sandbox.ErrSandboxUnavailable, err)
		}
	}
	return dir, nil
}

// addressSpaceExtra is the address space a language's interpreter reserves
// without using it, added to the address-space limit where one applies
// (without a cgroup): python with numpy, pandas and matplotlib maps about
// 300 MB for 90 MB resident (OpenBLAS reserves buffers it may never touch,
// and hangs in its first matrix operation when it cannot). The memory a
// program actually uses is bounded by the data limit.
func addressSpaceExtra(lang string) int64 {
	if lang == "python" {
		return 1 << 30
	}
	return 0
}

// Helpers are the internal subcommands of the binary that process mode
// re-executes it as, by their first argument: the run supervisor, which
// stays for the whole run and kills whatever the program leaves, and the
// exec stage, which becomes the program. Each returns the exit status. A
// binary that runs process mode must run the one its first argument names,
// and nothing else: cmd/codeexec registers them with its subcommands.
func Helpers() map[string]func() int { return maps.Clone(executor.Helpers) }

// MaybeRunHelper runs the helper that the first argument names (see
// Helpers) and exits with its status; it returns when the process was not
// started as one. Test binaries that run process-mode code call it first in
// TestMain.
func MaybeRunHelper() { executor.MaybeRunHelper() }

// Close stops the runs in flight, waits for their cleanup and removes the
// work root. It is safe to call more than once.
func (r *Runner) Close() error {
	if !r.runs.Close() {
		return nil
	}
	if r.pool != nil {
		r.pool.close()
	}
	r.closeCgroups()
	if r.sharedUID != nil {
		_ = r.sharedUID.Close()
	}
	return r.workRoot.Remove()
}

// CloseInheritedOnExec marks every descriptor of this process above stdio
// close-on-exec, so that no program it starts, in any mode, gets one: the
// server calls it at start for what it inherited. Safe to call any number of
// times.
func CloseInheritedOnExec() error { return executor.CloseInheritedOnExec() }
