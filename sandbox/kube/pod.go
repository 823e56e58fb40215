package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
	"github.com/codeexec/codeexec/sandbox/kube/internal/kubeapi"
)

// The uids that pods run as: each pod gets one at random from this range,
// so that the per-user limits of the node's kernel are the pod's own: the
// process limit (RLIMIT_NPROC, which counts every process of the uid on the
// node: kubernetes has no per-pod pids field, so it is the run's pids
// limit), inotify instances and the like. The range stays below 65536, as
// user namespaces (hostUsers: false) require; nodes should have no user of
// their own in it.
const (
	runUIDFirst = 20000
	runUIDLast  = 59999
)

// Sizes of the pod besides the request's limits.
const (
	// shmMax caps /dev/shm (at most the file size limit too).
	shmMax = 64 << 20
	// ephemeralStorage is requested and limited for each pod: its output
	// (the node keeps it in the pod's log until the pod is removed) and
	// nothing else, as its root filesystem is read-only and /tmp is in
	// memory.
	ephemeralStorage = 64 << 20
)

// podSpec says what a locked-down pod runs and within which limits.
type podSpec struct {
	role     string // value of LabelRole
	lang     string // language of a run pod; "" for the probe
	cmd      []string
	limits   sandbox.Limits // container limits (warmpool.ContainerLimits)
	deadline time.Time      // after it, the pod is a leftover anyone may remove
	framed   bool           // cmd is the run supervisor, whose output is framed
	nonce    string         // the supervisor's trailer nonce when framed: the first line of its stdin
	secret   bool           // the supervisor keeps its nonce from the program (runproto.Supervisor.Secret)
	egress   bool           // the pod reaches the egress proxy through a relay (egress.go)
}

// podSession is a pod whose run container has started and is attached: its
// stdin is ours, its output is being read and its state followed. Until a
// run gives it input it can wait in the pool.
type podSession struct {
	name     string
	lang     string
	limits   sandbox.Limits
	deadline time.Time
	out      *runproto.Streams
	nonce    string
	secret   bool // a trailer with the nonce is the supervisor's (runproto.Supervisor.Secret)
	state    *podState

	stdin      *io.PipeWriter     // the program's input goes here
	stopStream context.CancelFunc // ends the attach stream
	streamDone chan struct{}      // closed once the attach stream ended
	streamErr  error              // valid once streamDone is closed

	exitedC    chan struct{} // closed once the container ended or the pod is gone
	exit       podExit       // valid once exitedC is closed
	brokenC    chan struct{} // closed when the stream ends or exitedC closes
	brokenOnce sync.Once
	stop       chan struct{} // closed by discard: the followers stop

	egress *podEgress // the pod's relay and proxy session, when it has egress
}

// podExit is how the run container ended, as the pod's status said.
type podExit struct {
	code   int32
	reason string // "Completed", "OOMKilled", "Error", ...
	gone   bool   // the pod was deleted before its container was seen to end
}

// Language, Limits, Deadline and Broken make a podSession a warm pool item.
func (s *podSession) Language() string        { return s.lang }
func (s *podSession) Limits() sandbox.Limits  { return s.limits }
func (s *podSession) Deadline() time.Time     { return s.deadline }
func (s *podSession) Broken() <-chan struct{} { return s.brokenC }

// markBroken closes brokenC once.
func (s *podSession) markBroken() { s.brokenOnce.Do(func() { close(s.brokenC) }) }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// newPodName names a pod: codeexec-<role>-<random>.
func newPodName(role string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "codeexec-" + role + "-" + hex.EncodeToString(b)
}

// runUID draws the uid of a pod (see runUIDFirst).
func runUID() int64 {
	n, _ := rand.Int(rand.Reader, big.NewInt(runUIDLast-runUIDFirst+1))
	return runUIDFirst + n.Int64()
}

// ulimits is the shell text PID 1 runs first: the limits a pod has no field
// for. dash's ulimit -f counts 512-byte blocks; -p is RLIMIT_NPROC.
func ulimits(lim sandbox.Limits) string {
	var b strings.Builder
	if lim.OpenFiles > 0 {
		fmt.Fprintf(&b, "ulimit -n %d || exit 125\n", lim.OpenFiles)
	}
	if lim.FileSizeBytes > 0 {
		fmt.Fprintf(&b, "ulimit -f %d || exit 125\n", (lim.FileSizeBytes+511)/512)
	}
	if lim.Processes > 0 {
		fmt.Fprintf(&b, "ulimit -p %d || exit 125\n", lim.Processes)
	}
	return b.String()
}

// podEnv is the whole environment of a sandboxed program: nothing of the
// server's own environment is ever added. (Kubernetes adds the address of
// its API server's Service, KUBERNETES_SERVICE_HOST and _PORT, to every
// container whatever enableServiceLinks says: an address, not a secret.)
var podEnv = []corev1.EnvVar{
	{Name: "PATH", Value: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	{Name: "HOME", Value: "/tmp"},
	{Name: "LANG", Value: "C.UTF-8"},
	{Name: "TMPDIR", Value: "/tmp"},
}

// podObject is the locked-down pod of spec, called name. Every isolation
// setting comes from here alone, so that a warm pod and a cold one are
// locked down identically.
func (r *Runner) podObject(name string, spec podSpec) *corev1.Pod {
	lim := spec.limits
	uid := runUID()
	res := corev1.ResourceList{
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(ephemeralStorage, resource.BinarySI),
	}
	if lim.MemoryBytes > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(lim.MemoryBytes, resource.BinarySI)
	}
	if lim.CPUs > 0 {
		res[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(math.Ceil(lim.CPUs*1000)), resource.DecimalSI)
	}
	shm := int64(shmMax)
	if lim.FileSizeBytes > 0 && lim.FileSizeBytes < shm {
		shm = lim.FileSizeBytes
	}
	var tmpSize *resource.Quantity
	if lim.FileSizeBytes > 0 {
		tmpSize = resource.NewQuantity(lim.FileSizeBytes, resource.BinarySI)
	}
	labels := map[string]string{LabelManagedBy: ManagedBy, LabelReplica: r.replica, LabelRole: spec.role}
	if spec.lang != "" {
		labels[LabelLanguage] = spec.lang
	}
	active := int64(math.Ceil(time.Until(spec.deadline).Seconds()))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Labels:          labels,
			Annotations:     map[string]string{AnnotationDeadline: spec.deadline.UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{r.lease.owner()},
		},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(0)),
			ActiveDeadlineSeconds:         &active,
			Hostname:                      "sandbox",
			// No cluster DNS: a name fails at once instead of reaching a
			// resolver of the cluster.
			DNSPolicy: corev1.DNSNone,
			DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr(true),
				RunAsUser:      &uid,
				RunAsGroup:     &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           r.cfg.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         spec.cmd,
				Stdin:           true,
				// StdinOnce closes the container's stdin when the attach
				// stream that was open first goes away: a warm pod's
				// supervisor or bootstrap then reads end-of-file and the pod
				// ends, so a server that crashed leaves only ended pods.
				StdinOnce:  true,
				TTY:        false,
				WorkingDir: "/tmp",
				Env:        podEnvOf(spec),
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr(false),
					ReadOnlyRootFilesystem:   ptr(true),
					Privileged:               ptr(false),
					RunAsNonRoot:             ptr(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				// Requests equal limits: the pod is Guaranteed, placed where
				// its limits fit, and the last to be evicted.
				Resources: corev1.ResourceRequirements{Requests: res, Limits: res},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "shm", MountPath: "/dev/shm"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmpSize}}},
				{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(shm, resource.BinarySI)}}},
			},
		},
	}
	if r.cfg.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = &r.cfg.RuntimeClass
	}
	if r.cfg.UserNamespaces {
		pod.Spec.HostUsers = ptr(false)
	}
	return pod
}

// runSpec is the specification of a run pod of lang, warm or cold: only
// its role and deadline differ between the two.
func (r *Runner) runSpec(lang string, lim sandbox.Limits, role string, deadline time.Time) podSpec {
	cl := containerLimits(lim)
	// Hold: containerd 1.6's CRI can lose what a container wrote just
	// before it exited (seen on the test cluster: the end of an archive of
	// artifacts), so PID 1 waits for the server's word. The python
	// supervisor keeps its nonce from the program.
	sup := runproto.Supervisor{Python: r.python, Before: ulimits(cl), Hold: true}
	return podSpec{
		role:     role,
		lang:     lang,
		cmd:      runproto.Command(lang, r.interps[lang], sup),
		limits:   cl,
		deadline: deadline,
		framed:   true,
		nonce:    runproto.NewNonce(),
		secret:   sup.Secret(),
		egress:   r.cfg.Egress != nil,
	}
}

// runDeadline is the deadline of a cold run pod.
func runDeadline(now time.Time, timeout time.Duration) time.Time {
	if timeout > 0 {
		return now.Add(timeout + leftoverGrace)
	}
	return now.Add(noTimeoutDeadline)
}

// start creates a locked-down pod, waits until its container runs,
// attaches to it and hands the supervisor its nonce. ctx bounds the start
// only; the session lives until release. On error nothing is left on the
// cluster.
func (r *Runner) start(ctx context.Context, spec podSpec) (*podSession, error) {
	name, st, err := r.createPod(ctx, spec)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*podSession, error) {
		r.deletePod(name)
		r.watch.forget(name, st)
		return nil, err
	}
	s := &podSession{
		name: name, lang: spec.lang, limits: spec.limits, deadline: spec.deadline,
		out:        runproto.NewStreams(spec.framed, spec.nonce),
		nonce:      spec.nonce,
		secret:     spec.secret,
		state:      st,
		streamDone: make(chan struct{}),
		exitedC:    make(chan struct{}),
		brokenC:    make(chan struct{}),
		stop:       make(chan struct{}),
	}
	pr, pw := io.Pipe()
	s.stdin = pw
	streamCtx, stopStream := context.WithCancel(context.Background())
	s.stopStream = stopStream
	exec, err := r.attacher(name)
	if err != nil {
		stopStream()
		return fail(fmt.Errorf("kubernetes: %w: attaching to the pod %s: %v", sandbox.ErrSandboxUnavailable, name, err))
	}
	// The supervisor reads its nonce before it starts anything (see
	// runproto): it never appears in a command line or the environment.
	var stdin io.Reader = pr
	if spec.framed {
		stdin = io.MultiReader(strings.NewReader(spec.nonce+"\n"), pr)
	}
	go func() {
		err := exec.StreamWithContext(streamCtx, remotecommand.StreamOptions{Stdin: stdin, Stdout: s.out.Stdout(), Stderr: s.out.Stderr()})
		if err != nil {
			r.log.Debug("the attach stream of a pod ended with an error", "pod", name, "err", err)
		}
		s.streamErr = err
		s.out.End()
		// A write of the program's input that the stream no longer reads
		// fails instead of blocking.
		_ = pr.CloseWithError(io.ErrClosedPipe)
		close(s.streamDone)
	}()
	go s.follow()
	if spec.egress {
		// The relay listens before the program is handed over.
		if s.egress, err = r.startRelay(ctx, s); err != nil {
			r.discard(s)
			return nil, err
		}
	}
	return s, nil
}

// createPod creates the locked-down pod of spec, tracked as live and
// followed (st; the caller forgets it), and waits until its container runs.
// ctx bounds the wait (and so does Close). On error nothing is left on the
// cluster.
func (r *Runner) createPod(ctx context.Context, spec podSpec) (name string, st *podState, err error) {
	name = newPodName(spec.role)
	st = r.watch.follow(name)
	pod := r.podObject(name, spec)
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer cancel()
	if err := r.track(name); err != nil {
		r.watch.forget(name, st)
		return "", nil, fmt.Errorf("kubernetes: %w", err)
	}
	if _, err := r.c.Pods.Create(opCtx, pod, metav1.CreateOptions{}); err != nil {
		r.untrack(name)
		r.watch.forget(name, st)
		return "", nil, apiErr("creating a pod", err)
	}
	fail := func(err error) (string, *podState, error) {
		r.deletePod(name)
		r.watch.forget(name, st)
		return "", nil, err
	}
	// The caller's ctx ends the wait too (a cancelled run must not wait
	// for its pod to be scheduled).
	waitCtx, waitCancel := context.WithCancel(ctx)
	stopWait := context.AfterFunc(r.doneCtx, waitCancel)
	err = st.wait(waitCtx, podStartTimeout, running, describePending)
	stopWait()
	waitCancel()
	switch {
	case errors.Is(err, errGone):
		return fail(fmt.Errorf("kubernetes: %w: the pod %s was deleted from outside before its container started", sandbox.ErrSandboxUnavailable, name))
	case err != nil && ctx.Err() != nil:
		return fail(fmt.Errorf("kubernetes: cancelled while the pod %s started: %w", name, ctx.Err()))
	case err != nil && isClosed(r.done):
		return fail(fmt.Errorf("kubernetes: %w while the pod %s started", sandbox.ErrClosed, name))
	case err != nil:
		return fail(fmt.Errorf("kubernetes: %w: the pod %s in namespace %s did not start: %v", sandbox.ErrSandboxUnavailable, name, r.cfg.Namespace, err))
	}
	return name, st, nil
}

// follow closes exitedC once the pod's status says its container ended, or
// the pod is gone, and brokenC once either that or the stream's end
// happens; it stops when the session is discarded.
func (s *podSession) follow() {
	go func() {
		select {
		case <-s.streamDone:
			s.markBroken()
		case <-s.stop:
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := s.state.wait(ctx, math.MaxInt64, func(pod *corev1.Pod, gone bool) (bool, error) {
		if t := terminated(pod); t != nil {
			s.exit = podExit{code: t.ExitCode, reason: t.Reason}
			return true, nil
		}
		if gone {
			s.exit = podExit{code: -1, reason: "deleted", gone: true}
			return true, nil
		}
		return false, nil
	}, describePending)
	if err == nil {
		close(s.exitedC)
		s.markBroken()
	}
}

// attacher makes the executor of pods/attach for the run container.
func (r *Runner) attacher(name string) (remotecommand.Executor, error) {
	return r.executor(name, "attach", &corev1.PodAttachOptions{Container: containerName, Stdin: true, Stdout: true, Stderr: true})
}

// execKill runs kill -9 -1 in the run container, as the run's user: every
// process of the container but its PID 1 gets SIGKILL.
func (r *Runner) execKill(ctx context.Context, name string) error {
	exec, err := r.executor(name, "exec", &corev1.PodExecOptions{Container: containerName, Command: []string{"/bin/sh", "-c", "kill -9 -1"}, Stdout: true, Stderr: true})
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
}

// executor makes the executor of a pod's attach or exec subresource:
// WebSocket first, SPDY when the API server does not upgrade to it.
func (r *Runner) executor(name, sub string, opts runtime.Object) (remotecommand.Executor, error) {
	u := r.c.Core.Post().Namespace(r.cfg.Namespace).Resource("pods").Name(name).SubResource(sub).VersionedParams(opts, kubeapi.ParamCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(r.c.Config, "GET", u.String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(r.c.Config, "POST", u)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// deletePod deletes a pod at once (grace period 0: its containers are
// killed) with a context of its own, and forgets it. A pod that is already
// gone is not an error.
func (r *Runner) deletePod(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := r.c.Pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		r.log.Warn("could not delete a pod; the sweeper will", "pod", name, "err", err)
		return
	}
	r.untrack(name)
}

// discard ends a session: it closes its stream and deletes its pod. It
// blocks until the API server accepted the deletion; release is the
// asynchronous form.
func (r *Runner) discard(s *podSession) {
	if s.egress != nil {
		s.egress.close()
	}
	s.stopStream()
	_ = s.stdin.CloseWithError(io.ErrClosedPipe)
	r.deletePod(s.name)
	close(s.stop)
	r.watch.forget(s.name, s.state)
}

// release discards a session in the background. Close waits for every
// release, so no pod outlives the Runner.
func (r *Runner) release(s *podSession) {
	r.removals.Add(1)
	go func() {
		defer r.removals.Done()
		r.discard(s)
	}()
}

// apiErr wraps an API failure during a run as ErrSandboxUnavailable with
// one sentence saying what was being done.
func apiErr(doing string, err error) error {
	return fmt.Errorf("kubernetes: %w: the API server refused or failed %s (%v)", sandbox.ErrSandboxUnavailable, doing, err)
}
