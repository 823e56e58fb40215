package process

import (
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// The pool's demand: what requests asked for is kept prepared, more of it
// while back-to-back requests find none loaded, less once runs wait
// unused, and nothing of a key asked for no more.
func TestDemand(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	py := keyOf("python", sandbox.Limits{Timeout: time.Second, OutputBytes: 1})
	js := keyOf("javascript", sandbox.Limits{Timeout: time.Second})
	targets := func(d *demand, now time.Time) map[poolKey]int {
		got := map[poolKey]int{}
		for _, w := range d.targets(now) {
			got[w.key] = w.target
		}
		return got
	}
	check := func(what string, got map[poolKey]int, want map[poolKey]int) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: targets %v, want %v", what, got, want)
		}
		for k, n := range want {
			if got[k] != n {
				t.Fatalf("%s: targets %v, want %v", what, got, want)
			}
		}
	}

	d := newDemand(1, 3, nil, t0)
	check("before any request", targets(d, t0), map[poolKey]int{{}: 1})
	d.asked(py, t0, false)
	check("after a first python request", targets(d, t0), map[poolKey]int{py: 1})
	if k := keyOf("python", sandbox.Limits{Timeout: time.Second, OutputBytes: 99}); k != py {
		t.Fatalf("the output cap is part of the key: %v != %v", k, py)
	}
	d.asked(py, t0, false)
	d.asked(py, t0, false)
	d.asked(py, t0, false)
	check("after back-to-back misses", targets(d, t0), map[poolKey]int{py: 3})
	d.asked(py, t0, true)
	d.asked(js, t0.Add(time.Minute), true)
	check("a hit keeps the target", targets(d, t0.Add(time.Minute)), map[poolKey]int{py: 3, js: 1})
	if ws := d.targets(t0.Add(time.Minute)); ws[0].key != js {
		t.Fatalf("the key asked for last comes first: %v", ws)
	}
	d.idle(py)
	d.idle(py)
	d.idle(py)
	check("after runs waited unused", targets(d, t0.Add(time.Minute)), map[poolKey]int{py: 1, js: 1})
	check("once python is forgotten", targets(d, t0.Add(forgetAfter+time.Second)), map[poolKey]int{js: 1})
	check("once everything is forgotten", targets(d, t0.Add(time.Minute+forgetAfter+time.Second)), map[poolKey]int{{}: 1})

	wanted := newDemand(2, 4, []poolKey{py, {}}, t0)
	check("wanted from the start", targets(wanted, t0), map[poolKey]int{py: 2, {}: 2})

	none := newDemand(0, 0, nil, t0)
	none.asked(py, t0, false)
	check("a pool of size 0", targets(none, t0), map[poolKey]int{})
}
