package process_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestEgressAllowlist runs the shared egress check in process mode: the
// listeners are on the host's loopback, which the run's own network
// namespace cannot reach except through the proxy.
func TestEgressAllowlist(t *testing.T) {
	t.Parallel()
	requireActive(t, newRunnerWith(t), "network namespace")
	e := sandboxtest.StartEgress(t, "127.0.0.1")
	for _, allowPrivate := range []bool{true, false} {
		name := map[bool]string{true: "private allowed", false: "private refused"}[allowPrivate]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			proxy := proxy.New(e.Policy(t, allowPrivate), nil)
			r, err := process.New(context.Background(), process.Config{Languages: []string{"python", "bash"}, WorkRoot: WorkRoot(t), Egress: proxy})
			if err != nil {
				t.Fatalf("process.New: %v", err)
			}
			t.Cleanup(func() { _ = r.Close() })
			// 127.0.0.1 inside the run is the run's own loopback.
			e.CheckEgress(t, r, allowPrivate, "127.0.0.1")
			// A session's calls reach what a run reaches, each with a
			// report of its own.
			e.CheckSessionEgress(t, r.Sessions(), allowPrivate, "127.0.0.1")
			if allowPrivate {
				// A run's own allowlist (a principal's network) narrows
				// the proxy's, for runs and sessions.
				e.CheckNarrowedEgress(t, r, r.Sessions())
			}
		})
	}
}

func TestEgressNeedsNetworkNamespace(t *testing.T) {
	t.Parallel()
	_, err := process.New(context.Background(), process.Config{
		Languages: []string{"python"}, WorkRoot: WorkRoot(t),
		Disable: []process.Feature{process.FeatureNetwork},
		Egress:  proxy.New(egress.Policy{}, nil),
	})
	if !errors.Is(err, sandbox.ErrSandboxUnavailable) {
		t.Fatalf("process.New with egress and no network namespace: %v, want ErrSandboxUnavailable", err)
	}
}

// The listener the supervisor hands over is the server's alone: the
// program holds no descriptor of it (it could otherwise accept the run's
// own proxy connections), and the only socket it sees is its own.
func TestEgressListenerNotInherited(t *testing.T) {
	t.Parallel()
	requireActive(t, newRunnerWith(t), "network namespace")
	proxy := proxy.New(egress.Policy{}, nil)
	r, err := process.New(context.Background(), process.Config{Languages: []string{"bash"}, WorkRoot: WorkRoot(t), Egress: proxy})
	if err != nil {
		t.Fatalf("process.New: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	res, err := r.Run(context.Background(), sandboxtest.Req("bash", `for f in /proc/self/fd/*; do readlink "$f"; done`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout, "socket:") {
		t.Fatalf("the program holds a socket it did not open:\n%s", res.Stdout)
	}
}
