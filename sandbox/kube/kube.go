// Package kube is codeexec's kubernetes sandbox (CODE_EXEC_SANDBOX=kubernetes):
// each run gets a fresh, locked-down pod on a cluster, with docker mode's
// containment, and the pod is deleted afterwards.
//
// Kubernetes places the pods; codeexec never chooses a node. A run's pod
// runs as a non-root uid of its own, with a read-only root filesystem, a
// memory-backed, size-capped /tmp, every capability dropped, no privilege
// escalation, the runtime's default seccomp profile, no service account
// token and no service links, requests equal to its limits (memory, CPU),
// an activeDeadlineSeconds, and optionally a RuntimeClass (gVisor) and a
// user namespace (hostUsers: false); see pod.go. Kubernetes has no per-pod
// "no network" switch, so New runs a probe pod that tries to reach the API
// server, the server's own addresses and a cloud's metadata service, and
// refuses to start when anything answers (see probe.go). With Config.Egress
// (CODE_EXEC_NETWORK=allowlist) the pods keep that network, and each reaches
// codeexec's egress proxy through a relay carried over a pods/exec stream of
// its own (see relay.go and egress.go).
//
// The program and its input reach the pod over pods/attach, with the same
// protocol as docker mode's containers (sandbox/internal/runproto): PID 1 is
// the supervisor, the interpreter is already loaded and waits for the
// program on stdin (StdinOnce), and the run ends by the protocol's rule:
// at the python supervisor's secret trailers, or, with the shell one, with
// the pod's container status as the runtime's word on how PID 1 exited.
// With Config.PoolSize > 0 a warm pool keeps that many pods per
// language started and attached ahead of demand (see pool.go); each serves
// one run.
//
// A session (Sessions) is a pod of its own, locked down the same way, whose
// PID 1 is the session supervisor; each call reaches it over pods/exec (see
// session.go), and under the allowlist each call has a relay of its own.
//
// Nothing is orphaned. Every pod carries the labels LabelManagedBy and
// LabelReplica, and an owner reference to the Lease that its replica (this
// Runner) holds and renews (lease.go). A sweeper, at start and every minute,
// deletes the pods of replicas whose Lease is stale or gone, and pods past
// their deadline (sweep.go). A server killed with SIGKILL leaves pods that
// end by themselves: a warm pod's stdin closes with the attach stream (its
// bootstrap reads end-of-file and exits), a run's pod reaches its
// activeDeadlineSeconds; the next sweep of any replica removes them.
package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/internal/lifecycle"
	"github.com/codeexec/codeexec/sandbox/internal/warmpool"
	"github.com/codeexec/codeexec/sandbox/kube/internal/kubeapi"
)

// Defaults and names that other programs (manifests, docs, tests) rely on.
const (
	// DefaultNamespace is where runs' pods go when Config.Namespace is empty.
	DefaultNamespace = "codeexec-runs"
	// DefaultImage is the sandbox image when Config.Image is empty: docker
	// mode's.
	DefaultImage = "codeexec-sandbox:latest"

	// LabelManagedBy, with the value ManagedBy, marks every pod and Lease
	// codeexec creates.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "codeexec"
	// LabelReplica names the replica (the Runner) that made a pod; it is
	// also the name of that replica's Lease.
	LabelReplica = "codeexec.io/replica"
	// LabelRole says what a pod is for: "run" (made for a request), "pool"
	// (made ahead of demand), "session" (a session's) or "probe".
	LabelRole = "codeexec.io/role"
	// LabelLanguage is the language a run pod runs.
	LabelLanguage = "codeexec.io/language"
	// AnnotationDeadline is the time (RFC 3339) after which a pod is a
	// leftover that any replica may delete.
	AnnotationDeadline = "codeexec.io/deadline"
)

// The values of LabelRole.
const (
	roleRun   = "run"
	rolePool  = "pool"
	roleProbe = "probe"
)

// containerName names the one container of every pod.
const containerName = "run"

const (
	// leftoverGrace is added to a run's timeout to form its deadline.
	leftoverGrace = 2 * time.Minute
	// noTimeoutDeadline is the deadline of a run without a timeout.
	noTimeoutDeadline = 24 * time.Hour
	// sweepEvery is how often the sweeper looks for leftovers.
	sweepEvery = time.Minute
	// cleanupTimeout bounds each deletion done on the way out of a run,
	// with a context that is not the caller's.
	cleanupTimeout = 15 * time.Second
	// apiTimeout bounds each API call made to set a run up.
	apiTimeout = 60 * time.Second
	// podStartTimeout bounds a pod's way to a running container:
	// scheduling, the image, the sandbox and the container.
	podStartTimeout = 2 * time.Minute
)

// NetworkCheck says what New does when its probe pod reaches something:
// the accepted values of CODE_EXEC_K8S_NETWORK_CHECK.
type NetworkCheck string

// The network checks.
const (
	// NetworkRefuse: New fails (the default).
	NetworkRefuse NetworkCheck = "refuse"
	// NetworkWarn: New starts, warns loudly and sandbox_info reports the
	// network as not isolated.
	NetworkWarn NetworkCheck = "warn"
)

// Config configures a Runner.
type Config struct {
	// Namespace is where the pods and the Lease go
	// (CODE_EXEC_K8S_NAMESPACE); "" means DefaultNamespace.
	Namespace string
	// Image is the sandbox image (CODE_EXEC_K8S_IMAGE); "" means DefaultImage.
	Image string
	// RuntimeClass names a RuntimeClass for the pods
	// (CODE_EXEC_K8S_RUNTIME_CLASS), for example gvisor; "" for the
	// cluster's default.
	RuntimeClass string
	// UserNamespaces gives each pod a user namespace of its own
	// (hostUsers: false; CODE_EXEC_K8S_USER_NAMESPACES).
	UserNamespaces bool
	// Languages are the enabled canonical language names; nil means every
	// language codeexec knows.
	Languages []string
	// Logger receives operational messages; nil discards them.
	Logger *slog.Logger
	// PoolSize is how many warm pods to keep per enabled language
	// (CODE_EXEC_K8S_POOL_SIZE); 0 creates every pod on demand.
	PoolSize int
	// PoolLimits are the limits the server asks for (only the pod's own
	// limits matter: memory, CPUs, processes, open files, file size). Warm
	// pods are made with them, and a request with other limits runs cold.
	// The zero value means "the limits of the first request".
	PoolLimits sandbox.Limits
	// NetworkCheck says what happens when the probe pod reaches something
	// (CODE_EXEC_K8S_NETWORK_CHECK); "" means NetworkRefuse.
	NetworkCheck NetworkCheck
	// NetworkCheckAddrs are more host:port destinations the probe pod must
	// not reach (CODE_EXEC_K8S_NETWORK_CHECK_ADDRS).
	NetworkCheckAddrs []string
	// Egress, when set, is the proxy through which runs reach the network
	// (CODE_EXEC_NETWORK=allowlist), over a relay in each pod (see
	// relay.go). It needs python3 in the image.
	Egress *proxy.Proxy
	// REST, when not nil, is the cluster to use; nil finds it: the file
	// KUBECONFIG names, the pod's service account (in-cluster), or
	// ~/.kube/config.
	REST *rest.Config
}

// Runner runs each request in a fresh pod.
//
// It is safe for concurrent use. Close deletes the pods it still has and
// its Lease; it is safe to call more than once.
type Runner struct {
	cfg     Config
	c       *kubeapi.Clients
	log     *slog.Logger
	replica string // LabelReplica of its pods, and its Lease's name
	lease   *replicaLease
	watch   *podWatch
	interps map[string]sandbox.Interpreter
	// python is the image's python3 that runs each run's supervisor
	// (runproto.SupervisorProgram); "" when it has none.
	python string
	facts  probeFacts
	langs  []sandbox.LanguageStatus
	caps   sandbox.Capabilities
	pool   *warmpool.Pool[*podSession]

	mu       sync.Mutex
	closed   bool
	live     map[string]struct{} // pods created and not yet deleted
	runs     sync.WaitGroup      // Run calls in flight
	removals sync.WaitGroup      // background releases in flight

	onRun func(name string, warm bool)         // tests: which pod served a run
	onEnd func(name string, bySupervisor bool) // tests: whether the secret supervisor's trailers ended a run

	done        chan struct{}   // closed by Close
	doneCtx     context.Context // ends at Close
	cancelDone  context.CancelFunc
	sweeperDone chan struct{}
	closeOnce   sync.Once
	closeErr    error
}

var _ sandbox.Runner = (*Runner)(nil)

// New connects to the cluster, checks that its identity has every
// permission it needs in the namespace (naming each one it lacks), makes
// the replica's Lease, removes the leftovers of replicas that stopped, runs
// the probe pod (the image's interpreters, the pod's protections, the
// network) and starts the warm pool.
//
// Errors wrap sandbox.ErrSandboxUnavailable and say what to do. The caller
// must Close the returned Runner.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.Languages == nil {
		cfg.Languages = sandbox.LanguageNames()
	}
	if cfg.NetworkCheck == "" {
		cfg.NetworkCheck = NetworkRefuse
	}
	cfg.PoolSize = max(cfg.PoolSize, 0)
	for _, l := range cfg.Languages {
		if _, ok := sandbox.Languages[l]; !ok {
			return nil, fmt.Errorf("kubernetes: %w %q in the enabled languages", sandbox.ErrUnknownLanguage, l)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("sandbox", "kubernetes")
	restCfg, source := cfg.REST, "the configuration given"
	if restCfg == nil {
		var err error
		if restCfg, source, err = kubeapi.LoadConfig(); err != nil {
			return nil, err
		}
	}
	c, err := kubeapi.New(restCfg, source, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if err := checkAccess(actx, c, cfg.Namespace); err != nil {
		return nil, err
	}
	r := &Runner{
		cfg:         cfg,
		c:           c,
		log:         log,
		replica:     "codeexec-" + newReplicaID(),
		live:        map[string]struct{}{},
		done:        make(chan struct{}),
		sweeperDone: make(chan struct{}),
	}
	r.doneCtx, r.cancelDone = context.WithCancel(context.Background())
	r.log = log.With("replica", r.replica)
	if r.lease, err = newLease(actx, c, r.log, r.replica); err != nil {
		return nil, err
	}
	if r.watch, err = startWatch(actx, c, LabelReplica+"="+r.replica); err != nil {
		_ = r.lease.close()
		return nil, fmt.Errorf("kubernetes: %w: %v", sandbox.ErrSandboxUnavailable, err)
	}
	fail := func(err error) (*Runner, error) {
		r.cancelDone()
		r.watch.stop()
		if lerr := r.lease.close(); lerr != nil {
			r.log.Warn("could not delete the replica's Lease", "err", lerr)
		}
		return nil, err
	}
	if n, err := r.sweep(actx, time.Now()); err != nil {
		r.log.Warn("could not remove leftover pods", "err", err)
	} else if n > 0 {
		r.log.Info("removed leftover pods of replicas that stopped", "count", n)
	}
	if err := r.probe(ctx); err != nil {
		return fail(err)
	}
	if cfg.Egress != nil {
		if err := r.checkEgress(ctx); err != nil {
			return fail(err)
		}
	}
	r.caps = r.capabilities()
	r.pool = warmpool.New[*podSession](poolMaker{r}, warmpool.Options{
		Size: cfg.PoolSize, Languages: warmpool.Languages(r.interps, r.cfg.Languages), Limits: cfg.PoolLimits,
		Parallel: refillParallel, MaxIdle: poolMaxIdle, Grace: leftoverGrace, MaxBackoff: refillMaxBackoff,
		Logger: r.log, What: "pod",
	})
	go r.sweepLoop()
	r.log.Info("kubernetes sandbox ready", "api_server", c.Config.Host, "config", c.Source, "namespace", cfg.Namespace,
		"image", cfg.Image, "runtime_class", cfg.RuntimeClass, "pool_size", cfg.PoolSize)
	return r, nil
}

// Capabilities returns what New found: the languages in the image and the
// protections in force, as the probe pod saw them.
func (r *Runner) Capabilities() sandbox.Capabilities {
	caps := r.caps
	if w := r.pool.Warning("CODE_EXEC_K8S_POOL_SIZE"); w != "" {
		caps.Warnings = append(slices.Clip(caps.Warnings), w)
	}
	return caps
}

// Close stops every run still in flight, deletes every pod this Runner
// still has (warm ones included) and its Lease, and stops following the
// cluster. It is safe to call more than once; later calls return the first
// call's result.
func (r *Runner) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		close(r.done)
		r.cancelDone()
		<-r.sweeperDone

		// Runs in flight see r.done, delete their pod and clean up; give
		// them a bounded time to do so. Then the pool deletes its warm
		// pods, and every deletion still in flight finishes.
		lifecycle.Drain(r.log, &r.runs, 2*cleanupTimeout, r.pool, &r.removals)

		var errs []error
		r.mu.Lock()
		names := make([]string, 0, len(r.live))
		for n := range r.live {
			names = append(names, n)
		}
		r.mu.Unlock()
		for _, n := range names {
			r.deletePod(n)
		}
		// A pod whose create answer was lost is known only to the API
		// server: ask it.
		if err := r.deleteOwn(); err != nil {
			errs = append(errs, err)
		}
		r.watch.stop()
		if err := r.lease.close(); err != nil {
			errs = append(errs, err)
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

// deleteOwn deletes whatever pods of this replica the API server still has.
func (r *Runner) deleteOwn() error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	list, err := r.c.Pods.List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy + "," + LabelReplica + "=" + r.replica})
	if err != nil {
		return fmt.Errorf("kubernetes: listing this replica's pods: %w", err)
	}
	for _, p := range list.Items {
		r.deletePod(p.Name)
	}
	return nil
}

// track records a pod as live; it fails once the Runner is closed.
func (r *Runner) track(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return sandbox.ErrClosed
	}
	r.live[name] = struct{}{}
	return nil
}

func (r *Runner) untrack(name string) {
	r.mu.Lock()
	delete(r.live, name)
	r.mu.Unlock()
}

func (r *Runner) isLive(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.live[name]
	return ok
}

// beginRun registers a run in flight, or fails when the Runner is closed.
func (r *Runner) beginRun() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("kubernetes: %w", sandbox.ErrClosed)
	}
	r.runs.Add(1)
	return nil
}

// containerLimits keeps the limits that are part of a pod's specification.
func containerLimits(l sandbox.Limits) sandbox.Limits { return warmpool.ContainerLimits(l) }

func newReplicaID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
