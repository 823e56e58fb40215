package sandboxtest

import (
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/warmpool"
)

// PoolWarning checks what sandbox_info (caps) says of a warm pool of one:
// nothing while no run took from it; that it is not keeping up, with every
// string of want, once backToBack runs (run) in a row drain it; nothing
// again once 20 runs each found a warm item (waitWarm before each). stats
// are the pool's counters. When
// fewer than a third of the runs in a row found none ready, the test
// skips: the mode made items as fast as the runs came.
func PoolWarning(t *testing.T, caps func() sandbox.Capabilities, stats func() warmpool.Stats, run, waitWarm func(), backToBack int, want ...string) {
	t.Helper()
	warning := func() string {
		for _, w := range caps().Warnings {
			if strings.Contains(w, "the warm pool is not keeping up with the runs") {
				return w
			}
		}
		return ""
	}
	waitWarm()
	if w := warning(); w != "" {
		t.Fatalf("a pool no run took from says it does not keep up: %s", w)
	}
	for range backToBack {
		run()
	}
	st := stats()
	misses, runs := st.Misses, st.Hits+st.Misses
	if 3*misses < runs {
		t.Skipf("back to back, only %d of %d runs found nothing warm: the pool kept up", misses, runs)
	}
	w := warning()
	for _, s := range want {
		if !strings.Contains(w, s) {
			t.Fatalf("%d of %d runs found nothing warm, and sandbox_info does not say the pool is not keeping up with %q: %q", misses, runs, s, caps().Warnings)
		}
	}
	for range 20 {
		waitWarm()
		run()
	}
	if w := warning(); w != "" {
		t.Fatalf("every run found a warm item, and sandbox_info still says: %s", w)
	}
}
