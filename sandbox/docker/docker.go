// Package docker is codeexec's docker sandbox: each run gets a fresh,
// locked-down container that is removed afterwards.
//
// A run's container has no network (network mode none), a read-only root
// filesystem with a size-capped tmpfs at /tmp (nosuid, nodev, noexec), a
// non-root user, every Linux capability dropped, no-new-privileges, the
// engine's default seccomp profile, and memory (without swap), CPU, pids,
// open-file and file-size limits taken from the request's Limits. The
// server's environment is never passed on.
//
// The program text and its standard input reach the container over the
// attached stdin stream, never through the filesystem of the host or the
// image. PID 1 of a run container is a small supervisor whose only child is
// the language's interpreter, already loaded and blocked reading the program;
// when the program exits, the supervisor kills what it left, writes a trailer
// with its exit status and exits, and the run's result is the trailer that
// ends the container's stream once the engine reports that exit (see
// sandbox/internal/runproto, the run protocol it shares with kubernetes
// mode).
//
// Because a run container needs nothing of its request until the program is
// written to it, containers can be created and started ahead of demand: with
// Config.PoolSize > 0 a warm pool keeps that many per language (see pool.go).
// A warm container is configured exactly like a cold one, serves exactly one
// run and is then removed.
//
// Every container carries the label io.codeexec.managed=true, the id of the
// Runner that made it, the server process that owns it (see LabelOwner), its
// role and a deadline after which it is certainly a leftover. New and a
// background reaper remove leftovers: containers whose owner ran on this host
// and no longer runs (whatever their state: a run container of a server that
// was SIGKILLed may still be running), containers whose deadline has passed,
// and pool containers of another Runner that have stopped (a warm container
// stops by itself when the server that attached to it goes away); nothing
// without the label is touched.
package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/docker/image"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/internal/lifecycle"
	"github.com/codeexec/codeexec/sandbox/internal/warmpool"
)

// Defaults and names that other programs (scripts, docs, tests) rely on.
const (
	// DefaultImage is the image used when Config.Image is empty; New builds
	// it when the engine lacks it (see sandbox/docker/image).
	DefaultImage = image.DefaultImage
	// BuildCommand is the script, in a checkout of codeexec, that builds
	// the sandbox images by hand.
	BuildCommand = "docker/build-sandbox-image.sh"

	// LabelManaged marks every container codeexec creates (value "true").
	LabelManaged = "io.codeexec.managed"
	// LabelInstance holds the id of the Runner that created the container.
	LabelInstance = "io.codeexec.instance"
	// LabelDeadline holds the Unix time (seconds) after which the container
	// is a leftover that any codeexec may remove.
	LabelDeadline = "io.codeexec.deadline"
	// LabelRole says what the container is for: "run" (created for a
	// request), "pool" (created ahead of demand) or "probe".
	LabelRole = "io.codeexec.role"
)

// The values of LabelRole.
const (
	roleRun   = "run"
	rolePool  = "pool"
	roleProbe = "probe"
)

const (
	// leftoverGrace is added to a run's timeout to form its deadline label.
	leftoverGrace = 2 * time.Minute
	// noTimeoutDeadline is the deadline of a run without a timeout.
	noTimeoutDeadline = 24 * time.Hour
	// reapEvery is how often the background reaper looks for leftovers.
	reapEvery = time.Minute
	// cleanupTimeout bounds each kill/inspect/remove done on the way out of
	// a run, with a context that is not the caller's.
	cleanupTimeout = 15 * time.Second
	// engineTimeout bounds each engine call made to set a run up.
	engineTimeout = 60 * time.Second
	// fallbackUser runs code when the image's own user is root or unset.
	fallbackUser = "65534:65534"
)

// Config configures a Runner.
type Config struct {
	// Image is the sandbox image (CODE_EXEC_DOCKER_IMAGE); "" means
	// DefaultImage. When the engine lacks it, New pulls it if its name
	// names a registry, or builds it if it is one of codeexec's own images
	// (see image.Fetcher), unless Pull is image.PullNever.
	Image string
	// BaseImage is the base that a build of codeexec's own image starts
	// from (CODE_EXEC_DOCKER_BASE_IMAGE); "" means image.DefaultBase.
	BaseImage string
	// Pull is CODE_EXEC_DOCKER_PULL; "" means image.PullMissing.
	Pull image.Policy
	// builds maps the images New builds when missing to their stage of
	// the Dockerfile; nil means image.Targets (tests name images of their
	// own, so as never to touch the real ones).
	builds map[string]string
	// Runtime is the OCI runtime to use (CODE_EXEC_DOCKER_RUNTIME), for
	// example "runsc"; "" means the engine's default. New fails when the
	// engine does not know it.
	Runtime string
	// Languages are the enabled canonical language names; nil means every
	// language codeexec knows.
	Languages []string
	// Logger receives operational messages; nil discards them.
	Logger *slog.Logger
	// PoolSize is how many warm containers to keep per enabled language
	// (CODE_EXEC_DOCKER_POOL_SIZE); 0 creates every container on demand.
	PoolSize int
	// Workspace is the operator's project folder on the engine's host
	// (CODE_EXEC_WORKSPACE), bound at sandbox.WorkspacePath in every
	// container; nil for none. A read-only bind is not recursive, so that
	// no mount below it is writable either.
	Workspace *sandbox.Workspace
	// PoolLimits are the limits the server asks for (only the container's
	// own limits matter: memory, CPUs, processes, open files, file size).
	// Warm containers are created with them, and a request with other
	// container limits runs cold. The zero value means "the limits of the
	// first request"; the pool then fills after that request.
	PoolLimits sandbox.Limits
	// Egress, when set, is the proxy through which runs reach the network
	// (CODE_EXEC_NETWORK=allowlist); see egress.go. It needs python3 in
	// the image and an engine on this host (the run's socket is
	// bind-mounted into its container).
	Egress *proxy.Proxy
	// PackagesCache, when set, is the packages layer's cache folder on the
	// engine's host (CODE_EXEC_PACKAGES=true; see sandbox/packages). Every
	// run container, warm ones included, sees it read-only at
	// PackagesCachePath (the folder is searchable, not listable), so that a
	// run with packages from the cache takes a warm container and names its
	// entry in the program header.
	PackagesCache string
}

// Runner runs each request in a fresh container on a Docker Engine.
//
// It is safe for concurrent use. Close kills and removes the containers it
// still has and closes the engine client; it is safe to call more than once.
type Runner struct {
	cfg      Config
	cli      *client.Client
	log      *slog.Logger
	instance string
	owner    string // value of LabelOwner ("" when /proc cannot tell)
	owners   owners // judges the owners of other containers
	user     string // user the containers run as ("" = the image's)
	uid      string // uid code runs as, from the probe
	// ownNetns: containers get a network namespace of the runtime's own
	// (NetworkDisabled) instead of the engine's network sandbox; see
	// container.go. The probe decides it.
	ownNetns bool
	engine   engineFacts
	interps  map[string]sandbox.Interpreter
	caps     sandbox.Capabilities

	egressDir   string // holds the runs' egress socket directories
	relayPython string // python3 in the image, which runs the egress relay
	// workspaceWarning names entries of the workspace that runs cannot
	// read, from the probe ("" for none).
	workspaceWarning string

	pool *warmpool.Pool[*session]

	mu       sync.Mutex
	closed   bool
	live     map[string]struct{} // containers created and not yet removed
	runs     sync.WaitGroup      // Run calls in flight
	removals sync.WaitGroup      // background releases in flight

	onRun func(id string, warm bool) // tests: which container served a run

	done       chan struct{} // closed by Close
	reaperDone chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

var _ sandbox.Runner = (*Runner)(nil)

// engineFacts is what New learned about the engine, for Capabilities.
type engineFacts struct {
	host          string
	serverVersion string
	apiVersion    string
	runtime       string
	gvisor        bool // the runtime is gVisor's runsc (see gvisorPids)
	gvisorSeccomp bool // runsc runs with --oci-seccomp: the engine's profile applies inside gVisor
	cgroupVersion string
	cgroupDriver  string
	memoryLimit   bool
	swapLimit     bool
	pidsLimit     bool
	cpuQuota      bool
	seccomp       bool
	apparmor      bool
	selinux       bool
	userns        bool
	rootless      bool
	warnings      []string
}

// New connects to the Docker Engine named by the environment (DOCKER_HOST,
// DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, DOCKER_API_VERSION), negotiates the
// API version, checks that the image and the runtime exist, removes leftover
// containers of a crashed codeexec, and probes the interpreters inside the
// image once.
//
// An unreachable engine gives an error wrapping sandbox.ErrSandboxUnavailable.
// A missing image is pulled or built first (see Config.Image); one that
// cannot be gives an error wrapping sandbox.ErrSandboxUnavailable that says
// why and the exact command that gets it. Cancelling ctx stops a pull or a
// build, which then leaves no name behind.
// The caller must Close the returned Runner.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.Languages == nil {
		cfg.Languages = sandbox.LanguageNames()
	}
	if cfg.PoolSize < 0 {
		cfg.PoolSize = 0
	}
	for _, l := range cfg.Languages {
		if _, ok := sandbox.Languages[l]; !ok {
			return nil, fmt.Errorf("docker: %w %q in the enabled languages", sandbox.ErrUnknownLanguage, l)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	log = log.With("sandbox", "docker")

	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker: %w: the Docker client configuration is invalid (check DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH): %v", sandbox.ErrSandboxUnavailable, err)
	}
	r := &Runner{
		cfg:        cfg,
		cli:        cli,
		log:        log,
		instance:   newInstanceID(),
		owners:     localOwners(),
		live:       map[string]struct{}{},
		done:       make(chan struct{}),
		reaperDone: make(chan struct{}),
	}
	if o, ok := currentOwner(); ok {
		r.owner = o.String()
	}
	if err := r.connect(ctx); err != nil {
		_ = cli.Close()
		return nil, err
	}
	if err := r.checkImage(ctx); err != nil {
		_ = cli.Close()
		return nil, err
	}
	if n, err := r.removeLeftovers(ctx, time.Now()); err != nil {
		log.Warn("could not remove leftover containers", "err", err)
	} else if n > 0 {
		log.Info("removed leftover containers of an earlier codeexec", "count", n)
	}
	r.ownNetns = true // the probe tells whether it stays
	statuses, err := r.probe(ctx)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	if cfg.Egress != nil {
		if err := r.prepareEgress(ctx); err != nil {
			_ = cli.Close()
			return nil, err
		}
	}
	r.caps = r.capabilities(statuses)
	if cfg.Egress != nil {
		r.caps.Egress = cfg.Egress.Policy().Info(true, egressAddr)
	}
	r.pool = newPool(r, cfg.PoolSize, cfg.PoolLimits)
	go r.reap()
	log.Info("docker sandbox ready", "engine", r.engine.serverVersion, "api", r.engine.apiVersion,
		"image", cfg.Image, "runtime", r.engine.runtime, "instance", r.instance, "pool_size", cfg.PoolSize,
		"network_namespace", ifElse(r.ownNetns, "the runtime's", "the engine's network sandbox"))
	return r, nil
}

// connect pings the engine, negotiates the API version and reads the facts
// that Capabilities reports.
func (r *Runner) connect(ctx context.Context) error {
	host := engineHost(r.cli)
	r.engine.host = host
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := Ping(pctx, r.cli); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	r.engine.apiVersion = r.cli.ClientVersion()
	info, err := r.cli.Info(pctx, client.InfoOptions{})
	if err != nil {
		return fmt.Errorf("docker: %w: the Docker Engine at %s answered a ping but not an info request (%v)", sandbox.ErrSandboxUnavailable, host, err)
	}
	in := info.Info
	e := &r.engine
	e.serverVersion = in.ServerVersion
	e.cgroupVersion = in.CgroupVersion
	e.cgroupDriver = in.CgroupDriver
	e.memoryLimit, e.swapLimit, e.pidsLimit, e.cpuQuota = in.MemoryLimit, in.SwapLimit, in.PidsLimit, in.CPUCfsQuota
	for _, opt := range in.SecurityOptions {
		switch {
		case strings.HasPrefix(opt, "name=seccomp"):
			e.seccomp = true
		case strings.HasPrefix(opt, "name=apparmor"):
			e.apparmor = true
		case strings.HasPrefix(opt, "name=selinux"):
			e.selinux = true
		case strings.HasPrefix(opt, "name=userns"):
			e.userns = true
		case strings.HasPrefix(opt, "name=rootless"):
			e.rootless = true
		}
	}
	e.warnings = in.Warnings
	e.runtime = in.DefaultRuntime
	if r.cfg.Runtime != "" {
		if _, ok := in.Runtimes[r.cfg.Runtime]; !ok {
			known := make([]string, 0, len(in.Runtimes))
			for k := range in.Runtimes {
				known = append(known, k)
			}
			slices.Sort(known)
			return fmt.Errorf("docker: the Docker Engine at %s does not know the runtime %q set by CODE_EXEC_DOCKER_RUNTIME (it knows: %s)", host, r.cfg.Runtime, strings.Join(known, ", "))
		}
		e.runtime = r.cfg.Runtime
	}
	rt := in.Runtimes[e.runtime]
	e.gvisor = isGVisor(e.runtime, rt.Path)
	e.gvisorSeccomp = e.gvisor && slices.Contains(rt.Args, "--oci-seccomp")
	return nil
}

// isGVisor reports whether an engine runtime, by its name or the path of
// its binary, is gVisor's runsc.
func isGVisor(name, path string) bool {
	return name == "runsc" || filepath.Base(path) == "runsc"
}

// checkImage makes sure the image exists, fetching it when it is missing,
// and decides which user runs code.
func (r *Runner) checkImage(ctx context.Context) error {
	img, err := r.inspectImage(ctx)
	if cerrdefs.IsNotFound(err) {
		f := image.Fetcher{Engine: r.cli, Host: r.engine.host, Base: r.cfg.BaseImage, Policy: r.cfg.Pull, Targets: r.cfg.builds, Logger: r.log}
		if err := f.Fetch(ctx, r.cfg.Image); err != nil {
			return fmt.Errorf("docker: %w: %w", sandbox.ErrSandboxUnavailable, err)
		}
		img, err = r.inspectImage(ctx)
	}
	if err != nil {
		return fmt.Errorf("docker: %w: inspecting the image %s failed (%v)", sandbox.ErrSandboxUnavailable, r.cfg.Image, err)
	}
	user := ""
	if img.Config != nil {
		user = img.Config.User
	}
	if isRootUser(user) {
		r.log.Warn("the sandbox image runs as root; running code as nobody instead", "image", r.cfg.Image, "user", fallbackUser)
		r.user = fallbackUser
	}
	return nil
}

// inspectImage inspects the sandbox image.
func (r *Runner) inspectImage(ctx context.Context) (client.ImageInspectResult, error) {
	ictx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	return r.cli.ImageInspect(ictx, r.cfg.Image)
}

// isRootUser reports whether an image USER value means root (or is unset).
func isRootUser(u string) bool {
	name, _, _ := strings.Cut(u, ":")
	return name == "" || name == "0" || name == "root"
}

// Capabilities returns what New found: the languages in the image and the
// protections in force on this engine.
func (r *Runner) Capabilities() sandbox.Capabilities {
	caps := r.caps
	if r.pool == nil {
		return caps
	}
	if w := r.pool.Warning("CODE_EXEC_DOCKER_POOL_SIZE"); w != "" {
		caps.Warnings = append(slices.Clip(caps.Warnings), w)
	}
	return caps
}

// Close stops every run still in flight, kills and removes every container
// this Runner still has (warm ones included, and waits for the removals of
// finished runs), and closes the engine client. It is safe to call
// more than once; later calls return the first call's result.
func (r *Runner) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		close(r.done)
		<-r.reaperDone

		// Runs in flight see r.done, kill their container and clean up;
		// give them a bounded time to do so. The pool releases its warm
		// containers and stops refilling; then every release still in
		// flight finishes.
		lifecycle.Drain(r.log, &r.runs, 2*cleanupTimeout, r.pool, &r.removals)

		r.mu.Lock()
		ids := make([]string, 0, len(r.live))
		for id := range r.live {
			ids = append(ids, id)
		}
		r.mu.Unlock()
		var errs []error
		for _, id := range ids {
			if err := r.remove(id); err != nil {
				errs = append(errs, err)
			}
		}
		// A container whose create answer was lost (the engine was slow and
		// the call timed out) is known only to the engine: ask it.
		if err := r.removeOwn(); err != nil {
			errs = append(errs, err)
		}
		if err := r.cli.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := r.removeEgressDir(); err != nil {
			errs = append(errs, err)
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

// remove kills and removes a container with a context of its own, and
// forgets it. A container that is already gone is not an error.
func (r *Runner) remove(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, err := r.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: removing container %.12s: %w", id, err)
	}
	r.mu.Lock()
	delete(r.live, id)
	r.mu.Unlock()
	return nil
}

// removeOwn removes whatever containers of this Runner the engine still has.
func (r *Runner) removeOwn() error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	list, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelInstance+"="+r.instance),
	})
	if err != nil {
		return fmt.Errorf("docker: listing this server's containers: %w", err)
	}
	var errs []error
	for _, c := range list.Items {
		if c.Labels[LabelManaged] != "true" {
			continue
		}
		if err := r.remove(c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeLeftovers removes every codeexec container that isLeftover judges
// certainly unused, whichever instance made it, and returns how many it
// removed.
func (r *Runner) removeLeftovers(ctx context.Context, now time.Time) (int, error) {
	lctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	list, err := r.cli.ContainerList(lctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelManaged+"=true"),
	})
	if err != nil {
		return 0, fmt.Errorf("listing codeexec containers: %w", err)
	}
	n := 0
	var errs []error
	for _, c := range list.Items {
		if c.Labels[LabelManaged] != "true" { // belt and braces: never touch others
			continue
		}
		why := leftoverReason(c.Labels, c.State, time.Unix(c.Created, 0), r.instance, r.owners, now)
		if why == "" {
			continue // may belong to a live codeexec
		}
		if err := r.remove(c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		r.log.Info("removed leftover container", "id", shortID(c.ID), "instance", c.Labels[LabelInstance],
			"owner", c.Labels[LabelOwner], "role", c.Labels[LabelRole], "state", c.State, "reason", why)
		n++
	}
	return n, errors.Join(errs...)
}

// poolCreatedGrace is how long a pool container may stay created but not
// started before another codeexec takes it for a leftover.
const poolCreatedGrace = time.Minute

// isLeftover decides whether a labelled container is certainly not in use:
//   - its owner (LabelOwner) ran on this host identity and no longer runs,
//     whatever the container's state and deadline;
//   - its deadline has passed, or it has none that can be read;
//   - it is a pool container of another Runner (self is this Runner's
//     instance) that has stopped, or that was created and never started
//     within poolCreatedGrace.
//
// Anything else may belong to a live codeexec, on this host or another one
// that uses the same engine, and waits for its deadline.
func isLeftover(labels map[string]string, state container.ContainerState, created time.Time, self string, own owners, now time.Time) bool {
	return leftoverReason(labels, state, created, self, own, now) != ""
}

// leftoverReason is isLeftover with the reason, for the log ("" when the
// container may be in use).
func leftoverReason(labels map[string]string, state container.ContainerState, created time.Time, self string, own owners, now time.Time) string {
	if own.dead(labels[LabelOwner]) {
		return "its server no longer runs"
	}
	dl, err := strconv.ParseInt(labels[LabelDeadline], 10, 64)
	if err != nil {
		return "it has no deadline"
	}
	if !now.Before(time.Unix(dl, 0)) {
		return "its deadline has passed"
	}
	if labels[LabelRole] != rolePool || labels[LabelInstance] == self {
		return ""
	}
	switch state {
	case container.StateExited, container.StateDead:
		return "a warm container of another server that stopped"
	case container.StateCreated:
		if now.Sub(created) > poolCreatedGrace {
			return "a warm container of another server that never started"
		}
	}
	return ""
}

// reap removes leftovers periodically until Close.
func (r *Runner) reap() {
	defer close(r.reaperDone)
	lifecycle.Every(r.done, reapEvery, func(now time.Time) {
		ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
		defer cancel()
		if _, err := r.removeLeftovers(ctx, now); err != nil {
			r.log.Warn("could not remove leftover containers", "err", err)
		}
	})
}

// track records a container as live; it fails once the Runner is closed.
func (r *Runner) track(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live[id] = struct{}{}
	if r.closed {
		return sandbox.ErrClosed
	}
	return nil
}

// beginRun registers a run in flight, or fails when the Runner is closed.
func (r *Runner) beginRun() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("docker: %w", sandbox.ErrClosed)
	}
	r.runs.Add(1)
	return nil
}

func newInstanceID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// engineErr wraps an engine failure during a run as ErrSandboxUnavailable
// with one sentence saying what was being done.
func engineErr(doing string, err error) error {
	return fmt.Errorf("docker: %w: the Docker Engine failed while %s (%v)", sandbox.ErrSandboxUnavailable, doing, err)
}

// waitResult is what the engine's wait endpoint answered.
type waitResult struct {
	code int64
	err  error
}

// exitStatus turns a container's wait answer into an exit code.
func exitStatus(w container.WaitResponse) (int64, error) {
	if w.Error != nil && w.Error.Message != "" {
		return w.StatusCode, errors.New(w.Error.Message)
	}
	return w.StatusCode, nil
}
