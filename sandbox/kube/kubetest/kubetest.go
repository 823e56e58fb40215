// Package kubetest connects kubernetes-mode tests to a real cluster: the one
// KUBECONFIG names (.ci/ensure-kubernetes.sh makes one and prints the path
// of its kubeconfig). Without a cluster the tests skip, saying why, unless
// CODE_EXEC_REQUIRE_K8S=1, in which case they fail; under -short they skip.
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/kube/internal/kubeapi"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// RequireVariable makes a test that finds no cluster fail instead of skip.
const RequireVariable = "CODE_EXEC_REQUIRE_K8S"

// CPUs is the CPU limit, and so request, of the pods tests make: the test
// cluster is one node of two cores, and each pod requests what it is
// limited to, so pods of a whole CPU would not fit beside each other.
const CPUs = 0.2

// SkipOrFail skips the test, or fails it when CODE_EXEC_REQUIRE_K8S=1.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequireVariable) == "1" {
		t.Fatalf("%s (%s=1)", msg, RequireVariable)
	}
	t.Skipf("%s; set %s=1 to fail instead of skipping", msg, RequireVariable)
}

// Kubeconfig returns the path KUBECONFIG names, or skips (fails) the test
// when it names no readable file; it skips under -short.
func Kubeconfig(t testing.TB) string {
	t.Helper()
	sandboxtest.SkipShort(t, sandboxtest.NeedsKubernetes)
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		SkipOrFail(t, "no Kubernetes cluster: KUBECONFIG is not set (export KUBECONFIG=$(sudo .ci/ensure-kubernetes.sh))")
	}
	if _, err := os.Stat(kc); err != nil {
		SkipOrFail(t, "no Kubernetes cluster: KUBECONFIG=%s: %v", kc, err)
	}
	return kc
}

// Image is the sandbox image of the tests: CODE_EXEC_K8S_IMAGE ("" means
// kubernetes mode's default).
func Image() string { return os.Getenv("CODE_EXEC_K8S_IMAGE") }

// RuntimeClass is the RuntimeClass of the tests' pods:
// CODE_EXEC_K8S_RUNTIME_CLASS ("" means the cluster's default runtime). CI
// runs the kubernetes suites a second time with gvisor, the test cluster's
// gVisor (deploy/kubernetes/runtimeclass-gvisor.yaml, which
// .ci/ensure-kubernetes.sh applies).
func RuntimeClass() string { return os.Getenv("CODE_EXEC_K8S_RUNTIME_CLASS") }

// Limits are sandboxtest's limits with the tests' CPU.
func Limits(l sandbox.Limits) sandbox.Limits {
	l.CPUs = CPUs
	return l
}

// Start starts a Runner on the test cluster with start, or skips (fails)
// the test when no cluster answers; the test's cleanup closes it.
func Start[R sandbox.Runner](t testing.TB, start func(ctx context.Context) (R, error)) R {
	t.Helper()
	Kubeconfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := start(ctx)
	if errors.Is(err, sandbox.ErrSandboxUnavailable) && os.Getenv(RequireVariable) != "1" {
		t.Skipf("kubernetes mode unavailable: %v; set %s=1 to fail instead of skipping", err, RequireVariable)
	}
	if err != nil {
		t.Fatalf("starting kubernetes mode: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// Scaled is a Runner that runs each request with the tests' CPU limit (see
// CPUs), so that the shared suites, written for one CPU per run, fit the
// test cluster.
type Scaled struct{ sandbox.Runner }

// Run runs req with CPUs.
func (s Scaled) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	req.Limits = Limits(req.Limits)
	return s.Runner.Run(ctx, req)
}

// Sessions is a session backend that starts each session with the tests'
// CPU limit (see CPUs), so that the shared session suite fits the test
// cluster.
type Sessions struct{ sessions.Backend }

// Start starts a session with CPUs.
func (b Sessions) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	spec.Limits = Limits(spec.Limits)
	return b.Backend.Start(ctx, spec)
}

// Cluster is the test cluster's API, as its admin (KUBECONFIG).
type Cluster struct {
	*kubeapi.Clients
	namespace string
}

// Connect returns the test cluster's API for namespace, or skips (fails)
// the test when KUBECONFIG names none.
func Connect(t testing.TB, namespace string) *Cluster {
	t.Helper()
	kc := Kubeconfig(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		SkipOrFail(t, "KUBECONFIG cannot be used: %v", err)
	}
	c, err := kubeapi.New(cfg, "KUBECONFIG="+kc, namespace)
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{c, namespace}
}

// WaitPods waits, following them with a watch, until cond holds for the
// pods that carry selector (by name), or ctx ends.
func (c *Cluster) WaitPods(ctx context.Context, selector string, cond func(map[string]*corev1.Pod) bool) error {
	list, err := c.Pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}
	pods := map[string]*corev1.Pod{}
	for i := range list.Items {
		pods[list.Items[i].Name] = &list.Items[i]
	}
	if cond(pods) {
		return nil
	}
	w, err := c.Pods.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("the watch of pods %s ended", selector)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(pods, p.Name)
			} else {
				pods[p.Name] = p
			}
			if cond(pods) {
				return nil
			}
		case <-ctx.Done():
			names := make([]string, 0, len(pods))
			for n, p := range pods {
				names = append(names, n+" ("+string(p.Status.Phase)+")")
			}
			return fmt.Errorf("pods %s: %w; they are: %v", selector, ctx.Err(), names)
		}
	}
}

// Processes returns the command lines of the live processes of a pod's
// container, as a process of that container sees them (an exec of sh that
// reads /proc): under gVisor, a pod's processes are not the node's, and the
// node's /proc does not show them.
func (c *Cluster) Processes(ctx context.Context, pod, container string) ([]string, error) {
	opts := &corev1.PodExecOptions{Container: container, Stdout: true, Stderr: true,
		Command: []string{"/bin/sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null; echo; done`}}
	u := c.Core.Post().Namespace(c.namespace).Resource("pods").Name(pod).SubResource("exec").VersionedParams(opts, kubeapi.ParamCodec).URL()
	x, err := remotecommand.NewWebSocketExecutor(c.Config, "GET", u.String())
	if err != nil {
		return nil, err
	}
	var out, errOut bytes.Buffer
	if err := x.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		return nil, fmt.Errorf("exec in pod %s: %v (%s)", pod, err, strings.TrimSpace(errOut.String()))
	}
	var procs []string
	for l := range strings.Lines(out.String()) {
		if l = strings.TrimSpace(l); l != "" {
			procs = append(procs, l)
		}
	}
	return procs, nil
}
