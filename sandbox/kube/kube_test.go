package kube

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/kube/internal/kubeapi"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// These tests run against the real cluster that KUBECONFIG names
// (.ci/ensure-kubernetes.sh makes one) and the sandbox image imported into
// it. Without one they skip, unless CODE_EXEC_REQUIRE_K8S=1, in which case
// they fail. The cluster's node is this machine, so the processes of its
// pods show in this host's /proc.
//
// Most tests wait on pods being made far more than they use the CPU, so
// they run in parallel (go test's -parallel, the CPUs by default): each has
// a Runner, a replica, of its own, and looks only at that replica's pods.
// These stay serial, and go test runs them before any parallel one: those
// that sweep leftovers of other replicas or make a replica's Lease stale
// (sweep_test.go, TestSessionPodSweptAfterItsReplicaDied: every Runner
// sweeps as it starts), the network probe's (it lets pods reach each other
// through an iptables rule, and every Runner's probe would find that) and
// the permission checks' (they make ServiceAccounts and Roles).

// TestMain puts the suites' secret (sandboxtest.SecretName) in the
// environment of the whole test process: the suites that check that it
// does not reach a run run in parallel, where t.Setenv cannot.
func TestMain(m *testing.M) {
	if err := os.Setenv(sandboxtest.SecretName, sandboxtest.SecretValue); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newRunner starts a Runner on the test cluster and closes it at the end,
// then checks that it left neither pod nor Lease behind.
func newRunner(t testing.TB, cfg Config) *Runner {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Image == "" {
		cfg.Image = kubetest.Image()
	}
	if cfg.RuntimeClass == "" {
		cfg.RuntimeClass = kubetest.RuntimeClass()
	}
	if cfg.PoolLimits != (sandbox.Limits{}) {
		cfg.PoolLimits = kubetest.Limits(cfg.PoolLimits)
	}
	r := kubetest.Start(t, func(ctx context.Context) (*Runner, error) {
		r, err := New(ctx, cfg)
		if err == nil {
			r.onRun = servedBy.New(r).Add
		}
		return r, err
	})
	c, replica := r.c, r.replica
	t.Cleanup(func() {
		// Registered after kubetest.Start's: runs first... so close here too.
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if left := podNames(t, c, LabelReplica+"="+replica); len(left) > 0 {
			t.Errorf("pods of replica %s are left on the cluster: %v", replica, left)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := c.Leases.Get(ctx, replica, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Lease of replica %s is left on the cluster (get: %v)", replica, err)
		}
	})
	return r
}

// podNames lists the pods that carry selector (of one replica, say) that
// the API server still has.
func podNames(t testing.TB, c *kubeapi.Clients, selector string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := c.Pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("listing pods: %v", err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names
}

// servedBy records which pods served the runs of each test Runner.
var servedBy sandboxtest.ServedBy[*Runner]

func servedOf(r *Runner) *sandboxtest.Served { return servedBy.Of(r) }

// alive reports processes with marker in this host's /proc (the node is
// this machine), and pods that served a run of r and are still on the
// cluster once their deletion has had cleanupTimeout to go through.
func alive(r *Runner) func(t *testing.T, marker string) bool {
	return func(t *testing.T, marker string) bool {
		t.Helper()
		return sandboxtest.ProcessesAlive(t, marker) || len(lingering(t, r)) > 0
	}
}

// lingering returns the pods that served runs of r and are still on the
// cluster after waiting for their deletion.
func lingering(t testing.TB, r *Runner) []string {
	t.Helper()
	names, _ := servedOf(r).List()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var left []string
	for _, n := range names {
		if err := waitGone(ctx, r, n); err != nil {
			left = append(left, n)
		}
	}
	return left
}

// waitGone waits, by following r's pods, until the pod called name is gone.
func waitGone(ctx context.Context, r *Runner, name string) error {
	st := r.watch.follow(name)
	defer r.watch.forget(name, st)
	if _, err := r.c.Pods.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil
	}
	return st.wait(ctx, cleanupTimeout, func(_ *corev1.Pod, gone bool) (bool, error) { return gone, nil }, describePending)
}

func run(t *testing.T, r sandbox.Runner, req sandbox.Request) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req.Limits = kubetest.Limits(req.Limits)
	res, err := r.Run(ctx, req)
	if err != nil {
		t.Fatalf("Run(%s): %v", req.Language, err)
	}
	return res
}

// TestSuite runs the shared suite (files in and artifacts out included)
// on cold pods.
func TestSuite(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{})
	sandboxtest.RunSuite(t, kubetest.Scaled{Runner: r}, sandboxtest.Options{Mode: sandbox.ModeKubernetes, ScrubsEnv: true, Alive: alive(r)})
}
