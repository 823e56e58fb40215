package kube

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/warmpool"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// poolConfig is a Runner configuration with a warm pool whose pods suit
// sandboxtest.Req (with the tests' CPU).
func poolConfig(size int, langs ...string) Config {
	return Config{PoolSize: size, PoolLimits: sandboxtest.DefaultLimits(), Languages: langs}
}

// waitPool waits until cond holds for r's pool.
func waitPool(t testing.TB, r *Runner, what string, cond func(warmpool.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := r.pool.Wait(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitWarm waits until the pool holds at least n warm pods of lang.
func waitWarm(t testing.TB, r *Runner, lang string, n int) {
	t.Helper()
	waitPool(t, r, "warm "+lang+" pods", func(st warmpool.Stats) bool { return st.Ready[lang] >= n })
}

// warmOnly is a Runner that waits for a warm pod before each run that one
// can serve, so that those runs of the shared suite are served by the pool.
type warmOnly struct {
	*Runner
	t testing.TB
}

func (w warmOnly) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	req.Limits = kubetest.Limits(req.Limits)
	if lang, err := sandbox.CanonicalLanguage(req.Language); err == nil && containerLimits(req.Limits) == containerLimits(w.cfg.PoolLimits) {
		if _, ok := w.interps[lang]; ok {
			waitWarm(w.t, w.Runner, lang, 1)
		}
	}
	return w.Runner.Run(ctx, req)
}

// TestSuiteWarm runs the shared suite on warm pods.
func TestSuiteWarm(t *testing.T) {
	t.Parallel()
	r := newRunner(t, poolConfig(1))
	sandboxtest.RunSuite(t, warmOnly{r, t}, sandboxtest.Options{Mode: sandbox.ModeKubernetes, ScrubsEnv: true, Alive: alive(r)})
	_, warm := servedOf(r).List()
	n := 0
	for _, w := range warm {
		if w {
			n++
		}
	}
	if n < len(warm)/2 {
		t.Fatalf("only %d of %d runs were served warm", n, len(warm))
	}
	t.Logf("%d of %d runs served warm (the others asked for other limits)", n, len(warm))
}

// TestWarmAndColdLockedDownAlike checks that one function builds the
// isolation of both kinds of pod: their specifications, as the API server
// holds them, differ only in the name, the role label, the deadline and the
// uid, and every protection is set.
func TestWarmAndColdLockedDownAlike(t *testing.T) {
	t.Parallel()
	r := newRunner(t, poolConfig(1, "python"))
	pods := map[bool]*corev1.Pod{}
	rec := servedOf(r)
	r.onRun = func(name string, warm bool) {
		rec.Add(name, warm)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p, err := r.c.Pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("get pod %s: %v", name, err)
			return
		}
		pods[warm] = p
	}
	waitWarm(t, r, "python", 1)
	run(t, r, sandboxtest.Req("python", "print(1)"))
	req := sandboxtest.Req("python", "print(2)")
	req.Limits.MemoryBytes = 300 << 20 // other limits: cold
	run(t, r, req)
	warm, cold := pods[true], pods[false]
	if warm == nil || cold == nil {
		t.Fatalf("want one warm and one cold pod, got warm=%v cold=%v", warm != nil, cold != nil)
	}
	for _, p := range []*corev1.Pod{warm, cold} {
		checkLockedDown(t, p)
	}
	norm := func(p *corev1.Pod) corev1.PodSpec {
		s := *p.Spec.DeepCopy()
		s.ActiveDeadlineSeconds = nil
		s.SecurityContext.RunAsUser, s.SecurityContext.RunAsGroup = nil, nil
		s.Containers[0].Resources = corev1.ResourceRequirements{}
		return s
	}
	if w, c := norm(warm), norm(cold); !reflect.DeepEqual(w, c) {
		t.Errorf("warm and cold pod specifications differ:\nwarm %+v\ncold %+v", w, c)
	}
	if warm.Labels[LabelRole] != rolePool || cold.Labels[LabelRole] != roleRun {
		t.Errorf("roles: warm %q cold %q", warm.Labels[LabelRole], cold.Labels[LabelRole])
	}
}

// checkLockedDown checks every protection of a run pod's specification.
func checkLockedDown(t *testing.T, p *corev1.Pod) {
	t.Helper()
	s := p.Spec
	c := s.Containers[0]
	sc, psc := c.SecurityContext, s.SecurityContext
	checks := []struct {
		what string
		ok   bool
	}{
		{"labels", p.Labels[LabelManagedBy] == ManagedBy && p.Labels[LabelReplica] != ""},
		{"owner reference to the replica's Lease", len(p.OwnerReferences) == 1 && p.OwnerReferences[0].Kind == "Lease" && p.OwnerReferences[0].Name == p.Labels[LabelReplica]},
		{"deadline", p.Annotations[AnnotationDeadline] != "" && s.ActiveDeadlineSeconds != nil && *s.ActiveDeadlineSeconds > 0},
		{"no service account token", s.AutomountServiceAccountToken != nil && !*s.AutomountServiceAccountToken},
		{"no service links", s.EnableServiceLinks != nil && !*s.EnableServiceLinks},
		{"no node chosen", s.NodeSelector == nil && s.Affinity == nil && p.Spec.NodeName != ""}, // placed by the scheduler
		{"no restart", s.RestartPolicy == corev1.RestartPolicyNever},
		{"non-root uid", psc.RunAsNonRoot != nil && *psc.RunAsNonRoot && psc.RunAsUser != nil && *psc.RunAsUser >= runUIDFirst && *psc.RunAsUser <= runUIDLast},
		{"seccomp RuntimeDefault", psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"read-only root", sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem},
		{"no privilege escalation", sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation},
		{"not privileged", sc.Privileged != nil && !*sc.Privileged},
		{"capabilities dropped", sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0},
		{"requests equal limits", reflect.DeepEqual(c.Resources.Requests, c.Resources.Limits) && !c.Resources.Limits.Memory().IsZero() && !c.Resources.Limits.Cpu().IsZero()},
		{"stdin once", c.Stdin && c.StdinOnce && !c.TTY},
		{"memory-backed /tmp with a size", len(s.Volumes) == 2 && s.Volumes[0].EmptyDir != nil && s.Volumes[0].EmptyDir.Medium == corev1.StorageMediumMemory && s.Volumes[0].EmptyDir.SizeLimit != nil},
		{"no host namespaces", !s.HostNetwork && !s.HostPID && !s.HostIPC},
		{"no cluster DNS", s.DNSPolicy == corev1.DNSNone},
		{"no nonce in the command", !strings.Contains(strings.Join(c.Command, " "), "@@codeexec-end-")},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("pod %s: %s does not hold: %+v", p.Name, ch.what, p.Spec)
		}
	}
	for _, e := range c.Env {
		if !slices.Contains([]string{"PATH", "HOME", "LANG", "TMPDIR"}, e.Name) {
			t.Errorf("pod %s: environment variable %s", p.Name, e.Name)
		}
	}
}

// TestWarmPodNeverReused checks that each warm pod serves one run and is
// then deleted.
func TestWarmPodNeverReused(t *testing.T) {
	t.Parallel()
	r := newRunner(t, poolConfig(1, "bash"))
	for i := range 2 {
		waitWarm(t, r, "bash", 1)
		res := run(t, r, sandboxtest.Req("bash", "echo $((6*7))"))
		if res.Stdout != "42\n" {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
	names, warm := servedOf(r).List()
	if len(names) != 2 || !warm[0] || !warm[1] || names[0] == names[1] {
		t.Fatalf("runs were served by %v (warm %v), want two warm pods", names, warm)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := waitGone(ctx, r, names[0]); err != nil {
		t.Fatalf("the first warm pod %s is still there after its run: %v", names[0], err)
	}
}

// TestPoolSaysWhenItDoesNotKeepUp: runs back to back drain a pool of one,
// faster than the cluster makes pods, and sandbox_info says so; runs that
// each find a warm pod make the warning go.
func TestPoolSaysWhenItDoesNotKeepUp(t *testing.T) {
	t.Parallel()
	r := newRunner(t, poolConfig(1, "bash"))
	sandboxtest.PoolWarning(t, r.Capabilities, r.pool.Stats, func() {
		if res := run(t, r, sandboxtest.Req("bash", "echo $((6*7))")); res.Stdout != "42\n" {
			t.Fatalf("run: %+v", res)
		}
	}, func() { waitWarm(t, r, "bash", 1) }, 10, "no warm pod ready", "CODE_EXEC_K8S_POOL_SIZE=1")
}

// TestWarmPodDeletedFromOutsideIsReplaced deletes a warm pod through the
// API server: the pool notices, makes another, and the next run takes it.
func TestWarmPodDeletedFromOutsideIsReplaced(t *testing.T) {
	t.Parallel()
	r := newRunner(t, poolConfig(1, "python"))
	waitWarm(t, r, "python", 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := r.c.Pods.List(ctx, metav1.ListOptions{LabelSelector: LabelReplica + "=" + r.replica + "," + LabelRole + "=" + rolePool})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("want one warm pod of the replica, got %v (%v)", list, err)
	}
	victim := list.Items[0].Name
	if err := r.c.Pods.Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, r, "a replacement of the deleted warm pod", func(st warmpool.Stats) bool { return st.Broken >= 1 && st.Ready["python"] >= 1 })
	res := run(t, r, sandboxtest.Req("python", "print(2**64)"))
	names, warm := servedOf(r).List()
	if res.Stdout != "18446744073709551616\n" || len(names) != 1 || !warm[0] || names[0] == victim {
		t.Fatalf("after the warm pod %s was deleted, the run was served by %v (warm %v): %+v", victim, names, warm, res)
	}
}
