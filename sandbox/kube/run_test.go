package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestCapabilities checks that every protection the test cluster gives is
// reported active, as the probe pod found it, and that what kubernetes mode
// does not offer is said.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"python", "bash"}})
	caps := r.Capabilities()
	if caps.Mode != sandbox.ModeKubernetes {
		t.Fatalf("Mode = %q", caps.Mode)
	}
	for _, name := range []string{"python", "bash"} {
		if st, ok := caps.Language(name); !ok || !st.Available || st.Version == "" || !strings.HasPrefix(st.Interpreter, "/") {
			t.Errorf("language %s: %+v", name, st)
		}
	}
	if st, _ := caps.Language("javascript"); st.Available || !strings.Contains(st.Reason, "CODE_EXEC_LANGUAGES") {
		t.Errorf("javascript should be disabled: %+v", st)
	}
	// What the test cluster does not give: user namespaces (containerd
	// 1.6), logs kept off the node; a RuntimeClass unless the tests ask for
	// one (CODE_EXEC_K8S_RUNTIME_CLASS); and no pool.
	inactive := []string{"warm pool", "user namespace", "container logs off"}
	if kubetest.RuntimeClass() == "" {
		inactive = append(inactive, "runtime class")
	}
	for _, p := range caps.Protections {
		want := !slices.Contains(inactive, p.Name)
		if p.Active != want {
			t.Errorf("protection %q active=%v, want %v: %s", p.Name, p.Active, want, p.Detail)
		}
	}
	if i := caps.Isolation; !i.Network || !i.Filesystem || !i.Identity || !i.Environment || !i.Processes {
		t.Errorf("isolation %+v, want every boundary", i)
	}
	if len(caps.Warnings) != 1 || caps.Warnings[0] != unavailable {
		t.Errorf("warnings %q, want only what the mode does not offer", caps.Warnings)
	}
	// The test cluster's gvisor RuntimeClass is gVisor, and sandbox_info
	// says what differs there: /dev/shm is gVisor's own tmpfs, not capped
	// by size (under runc it is the pod's capped emptyDir).
	gvisor := kubetest.RuntimeClass() == "gvisor"
	detail := func(name string) string {
		for _, p := range caps.Protections {
			if p.Name == name {
				return p.Detail
			}
		}
		t.Fatalf("no protection %q", name)
		return ""
	}
	if rc := detail("runtime class"); gvisor != strings.Contains(rc, "gVisor, a kernel in user space") {
		t.Errorf("runtime class %q (CODE_EXEC_K8S_RUNTIME_CLASS=%q) says whether it is gVisor wrongly: %s", r.cfg.RuntimeClass, kubetest.RuntimeClass(), rc)
	}
	if tmp := detail("size-capped /tmp"); gvisor != strings.Contains(tmp, "/dev/shm is NOT capped by size") {
		t.Errorf("size-capped /tmp (gVisor: %v) says wrongly whether /dev/shm is capped: %s", gvisor, tmp)
	}
}

// TestOOMReported checks that a program the memory limit kills is reported
// as oom_killed.
func TestOOMReported(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"python"}})
	req := sandboxtest.Req("python", "b = []\nwhile True:\n    b.append(bytearray(16 << 20))")
	req.Limits.MemoryBytes = 128 << 20
	res := run(t, r, req)
	if !res.OOMKilled || res.ExitCode == 0 || res.Signal != "killed" {
		t.Fatalf("a memory bomb was not reported as killed by the memory limit: %+v", res)
	}
}

// TestPodDeletedFromOutside deletes a run's pod while its program runs:
// the run ends with an error that says so, not with a result.
func TestPodDeletedFromOutside(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"bash"}})
	pod := make(chan string, 1)
	rec := servedOf(r)
	r.onRun = func(name string, warm bool) { rec.Add(name, warm); pod <- name }
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		req := sandboxtest.Req("bash", "echo started; sleep 120")
		req.Limits.CPUs = kubetest.CPUs
		req.Limits.Timeout = 5 * time.Minute
		req.Observe = func(sandbox.Stream, []byte) { once.Do(func() { close(started) }) }
		_, err := r.Run(context.Background(), req)
		done <- err
	}()
	name := <-pod
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the run ended before its pod was deleted: %v", err)
	case <-ctx.Done():
		t.Fatal("the program did not start")
	}
	if err := r.c.Pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, sandbox.ErrSandboxUnavailable) || !strings.Contains(err.Error(), "deleted from outside") {
			t.Fatalf("Run after its pod was deleted: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after its pod was deleted")
	}
}

// TestPodGoneAfterRun checks that a run's pod is deleted once the run is
// over, whatever the run's end.
func TestPodGoneAfterRun(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"python"}})
	for _, c := range []struct{ name, code string }{
		{"exit", "print(1)"},
		{"timeout", "while True: pass"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := sandboxtest.Req("python", c.code)
			req.Limits.Timeout = 2 * time.Second
			run(t, r, req)
			names, _ := servedOf(r).List()
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			if err := waitGone(ctx, r, names[len(names)-1]); err != nil {
				t.Fatalf("the run's pod %s is still there: %v", names[len(names)-1], err)
			}
		})
	}
}

// TestSecretTrailersEndTheRun checks what ends a run. With the python
// supervisor, whose nonce no process of the run can read, its trailers and
// the archive after them end it, and the kubelet's report of the
// container's exit (about a second later) is not waited for; with the
// shell one (an image without python3), whose nonce the program can find,
// only the pod's status can say that the supervisor ended by itself, and
// the run waits for it. Either way the result is the program's: its exit
// status, its output and its artifacts.
func TestSecretTrailersEndTheRun(t *testing.T) {
	t.Parallel()
	for _, sup := range []string{"python", "shell"} {
		t.Run(sup, func(t *testing.T) {
			cfg := Config{Languages: []string{"python"}}
			if sup == "python" {
				cfg.PoolSize, cfg.PoolLimits = 1, sandboxtest.DefaultLimits()
			}
			r := newRunner(t, cfg)
			if sup == "shell" {
				// As for an image without python3, before anything
				// starts a pod.
				r.python = ""
			}
			var mu sync.Mutex
			var ends []bool
			r.onEnd = func(_ string, bySupervisor bool) {
				mu.Lock()
				defer mu.Unlock()
				ends = append(ends, bySupervisor)
			}
			for i := range 2 {
				req := sandboxtest.Req("python", "import sys\nopen('out.txt', 'w').write('x' * 5000)\nprint(2**64)\nsys.exit(3)")
				req.Artifacts = &artifacts.Options{MaxArtifacts: 20, MaxBytes: 16 << 20}
				res := run(t, r, req)
				if res.ExitCode != 3 || res.Stdout != "18446744073709551616\n" || res.TimedOut {
					t.Fatalf("run %d: %+v", i, res)
				}
				if c := res.Artifacts; c == nil || len(c.Artifacts) != 1 || c.Artifacts[0].Size != 5000 || c.Incomplete != "" {
					t.Fatalf("run %d: artifacts %+v", i, c)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if want := []bool{sup == "python", sup == "python"}; !slices.Equal(ends, want) {
				t.Errorf("runs ended by the secret trailers: %v, want %v", ends, want)
			}
		})
	}
}
