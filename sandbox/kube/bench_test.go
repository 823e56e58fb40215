package kube

import (
	"log/slog"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// The benchmarks of kubernetes mode. Each iteration is one complete run of
// a one-line program: cold creates a pod, waits for it to be scheduled and
// started, attaches, feeds, collects and deletes it; warm takes a pod from
// the pool (the timer is stopped while the pool refills, so it measures a
// run that finds a warm pod). Both include waiting for the kubelet to report
// how the pod's container ended, which the run's end needs (see run.go).
//
//	KUBECONFIG=$(sudo .ci/ensure-kubernetes.sh) CODE_EXEC_REQUIRE_K8S=1 go test ./sandbox/kube/ -run '^$' -bench . -benchtime 20x

var benchPrograms = []struct{ lang, code, want string }{
	{"python", "print(2**64)", "18446744073709551616\n"},
	{"javascript", "console.log(2n**64n + '')", "18446744073709551616\n"},
	{"bash", "echo $((6*7))", "42\n"},
}

func BenchmarkRun(b *testing.B) {
	for _, mode := range []struct {
		name string
		pool int
	}{{"cold", 0}, {"warm", 2}} {
		b.Run(mode.name, func(b *testing.B) {
			cfg := poolConfig(mode.pool)
			cfg.Logger = slog.New(slog.DiscardHandler)
			r := newRunner(b, cfg)
			for _, p := range benchPrograms {
				b.Run(p.lang, func(b *testing.B) {
					req := sandboxtest.Req(p.lang, p.code)
					req.Limits = kubetest.Limits(req.Limits)
					for b.Loop() {
						if mode.pool > 0 {
							b.StopTimer()
							waitWarm(b, r, p.lang, 1)
							b.StartTimer()
						}
						benchRun(b, r, req, p.want)
					}
				})
			}
		})
	}
}

func benchRun(b *testing.B, r *Runner, req sandbox.Request, want string) {
	res, err := r.Run(b.Context(), req)
	if err != nil {
		b.Fatal(err)
	}
	if res.Stdout != want {
		b.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}
