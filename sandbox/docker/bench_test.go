package docker

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// The benchmarks of docker mode. Each iteration is one complete run of a
// one-line program: cold creates, starts, feeds, collects and removes a
// container; warm takes a container from the pool (the timer is stopped
// while the pool refills, so it measures a run that finds a warm container);
// back-to-back does not wait, so it measures how fast the pool refills.
//
//	CODE_EXEC_REQUIRE_DOCKER=1 go test ./sandbox/docker/ -run '^$' -bench . -benchtime 50x

var benchPrograms = []struct{ lang, code, want string }{
	{"python", "print(2**64)", "18446744073709551616\n"},
	{"javascript", "console.log(2n**64n + '')", "18446744073709551616\n"},
	{"bash", "echo $((6*7))", "42\n"},
}

func benchRunner(b *testing.B, poolSize int) *Runner {
	cfg := poolConfig(poolSize)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, _ := newRunner(b, cfg)
	return r
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

func BenchmarkRun(b *testing.B) {
	for _, mode := range []struct {
		name string
		pool int
	}{{"cold", 0}, {"warm", 2}} {
		b.Run(mode.name, func(b *testing.B) {
			r := benchRunner(b, mode.pool)
			for _, p := range benchPrograms {
				b.Run(p.lang, func(b *testing.B) {
					req := sandboxtest.Req(p.lang, p.code)
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

// BenchmarkRunBackToBack runs python without pause on a pool of 2: once the
// pool is empty, each run takes whichever comes first, a refill or a cold
// container, so this measures the sustained rate; it reports the median and
// the 90th percentile of the runs too (p50-ms, p90-ms).
func BenchmarkRunBackToBack(b *testing.B) {
	r := benchRunner(b, 2)
	waitWarm(b, r, "python", 2)
	req := sandboxtest.Req("python", "print(2**64)")
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		benchRun(b, r, req, "18446744073709551616\n")
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	at := func(p int) float64 { return float64(took[(len(took)-1)*p/100]) / 1e6 }
	b.ReportMetric(at(50), "p50-ms")
	b.ReportMetric(at(90), "p90-ms")
}

// BenchmarkRunParallel4 runs python from 4 goroutines at once (the default
// CODE_EXEC_MAX_CONCURRENCY), cold and with pools of 2 and 8.
func BenchmarkRunParallel4(b *testing.B) {
	for _, size := range []int{0, 2, 8} {
		b.Run(fmt.Sprintf("pool=%d", size), func(b *testing.B) {
			r := benchRunner(b, size)
			if size > 0 {
				waitWarm(b, r, "python", size)
			}
			req := sandboxtest.Req("python", "print(2**64)")
			b.ResetTimer()
			var wg sync.WaitGroup
			work := make(chan struct{})
			for range 4 {
				wg.Go(func() {
					for range work {
						res, err := r.Run(b.Context(), req)
						if err != nil || res.Stdout != "18446744073709551616\n" {
							b.Errorf("run: %+v %v", res, err)
						}
					}
				})
			}
			for b.Loop() {
				work <- struct{}{}
			}
			close(work)
			wg.Wait()
		})
	}
}

// BenchmarkSessionVsWarm puts a call in a live session beside a run on a
// warm container, for the same one-line program: the session's interpreter
// is already loaded and holds the program's state, so a call is one write
// on the driver's attach stream and its answer.
//
//	CODE_EXEC_REQUIRE_DOCKER=1 go test ./sandbox/docker/ -run '^$' -bench SessionVsWarm -benchtime 50x
func BenchmarkSessionVsWarm(b *testing.B) {
	r := benchRunner(b, 1)
	for _, p := range benchPrograms[:2] {
		b.Run("warm-run/"+p.lang, func(b *testing.B) {
			req := sandboxtest.Req(p.lang, p.code)
			for b.Loop() {
				b.StopTimer()
				waitWarm(b, r, p.lang, 1)
				b.StartTimer()
				benchRun(b, r, req, p.want)
			}
		})
		for _, collect := range []bool{false, true} {
			name := "session/" + p.lang
			if collect {
				// As the server calls it: the changes of each call are
				// collected (one exec more).
				name = "session+artifacts/" + p.lang
			}
			b.Run(name, func(b *testing.B) {
				s, err := r.Sessions().Start(b.Context(), sessionSpec(p.lang, sandboxtest.DefaultLimits()))
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				req := sandboxtest.Req(p.lang, p.code)
				if collect {
					req.Artifacts = &artifacts.Options{}
				}
				for b.Loop() {
					res, err := s.Exec(b.Context(), req)
					if err != nil || res.Stdout != p.want {
						b.Fatalf("%+v %v", res, err)
					}
				}
			})
		}
	}
}
