package warmpool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// The pool's mechanics on fake items, in a synctest bubble (its clock is
// fake: idle timers and backoffs pass at once when everything waits). The
// modes' own tests (sandbox/docker, sandbox/kube) check it with real
// containers and pods.

type item struct {
	lang     string
	lim      sandbox.Limits
	deadline time.Time
	broken   chan struct{}
}

func (i *item) Language() string        { return i.lang }
func (i *item) Limits() sandbox.Limits  { return i.lim }
func (i *item) Deadline() time.Time     { return i.deadline }
func (i *item) Broken() <-chan struct{} { return i.broken }

// maker makes items, each taking slow (at once by default), or fails while
// fail is set.
type maker struct {
	mu       sync.Mutex
	fail     bool
	slow     time.Duration
	made     []*item
	released map[*item]bool
}

func (m *maker) Make(ctx context.Context, lang string, lim sandbox.Limits) (*item, error) {
	m.mu.Lock()
	slow := m.slow
	m.mu.Unlock()
	select {
	case <-time.After(slow):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return nil, errors.New("the engine is down")
	}
	it := &item{lang: lang, lim: lim, deadline: time.Now().Add(30 * time.Minute), broken: make(chan struct{})}
	m.made = append(m.made, it)
	return it, nil
}

func (m *maker) Release(it *item) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.released == nil {
		m.released = map[*item]bool{}
	}
	m.released[it] = true
}

func (m *maker) isReleased(it *item) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.released[it]
}

var lim = sandbox.Limits{Timeout: 20 * time.Second, MemoryBytes: 512 << 20, CPUs: 1, Processes: 128}

func options(size int) Options {
	return Options{Size: size, Languages: []string{"python", "bash"}, Limits: lim, Parallel: 1, MaxIdle: 10 * time.Minute, Grace: 2 * time.Minute, MaxBackoff: 10 * time.Second, What: "item"}
}

func wait(t *testing.T, p *Pool[*item], what string, cond func(Stats) bool) {
	t.Helper()
	if err := p.Wait(t.Context(), cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func full(n int) func(Stats) bool {
	return func(st Stats) bool { return st.Ready["python"] >= n && st.Ready["bash"] >= n }
}

// TestEachItemServesOnceAndIsReplaced: the pool fills every language, a
// Take hands an item out once (it never comes back) and the pool makes
// another; without a warm item Take returns none at once.
func TestEachItemServesOnceAndIsReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &maker{}
		p := New[*item](m, options(2))
		defer p.Close()
		wait(t, p, "a full pool", full(2))
		seen := map[*item]bool{}
		for range 5 {
			it, ok := p.Take("python", lim)
			if !ok || it.lang != "python" || seen[it] {
				t.Fatalf("Take = %v, %v (seen before: %v); want a python item never handed out before", it, ok, seen[it])
			}
			seen[it] = true
			wait(t, p, "the pool refilled", full(2))
		}
		if _, ok := p.Take("javascript", lim); ok {
			t.Fatal("Take of a language the pool does not keep returned an item")
		}
		if st := p.Stats(); st.Hits != 5 || st.Misses != 1 || st.Made != 9 {
			t.Fatalf("Stats = %+v, want 5 hits, 1 miss, 9 made (4 + 5 refills)", st)
		}
	})
}

// TestOtherLimitsRunCold: a run with other container limits, without a
// timeout, or whose timeout would outlast the item, gets none; the first
// Take teaches a pool without Limits its limits.
func TestOtherLimitsRunCold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &maker{}
		opts := options(1)
		opts.Limits = sandbox.Limits{}
		p := New[*item](m, opts)
		defer p.Close()
		if _, ok := p.Take("python", lim); ok {
			t.Fatal("a pool that does not know its limits yet handed out an item")
		}
		wait(t, p, "a full pool", full(1))
		other := lim
		other.MemoryBytes *= 2
		noTimeout := lim
		noTimeout.Timeout = 0
		long := lim
		long.Timeout = time.Hour
		for name, l := range map[string]sandbox.Limits{"other memory": other, "no timeout": noTimeout, "a timeout past the deadline": long} {
			if _, ok := p.Take("python", l); ok {
				t.Fatalf("%s: Take returned a warm item", name)
			}
		}
		if _, ok := p.Take("python", lim); !ok {
			t.Fatal("the run with the pool's limits found no item")
		}
	})
}

// TestBrokenItemReplaced: an item that breaks while it waits is released
// and replaced, and never handed out.
func TestBrokenItemReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &maker{}
		p := New[*item](m, options(1))
		defer p.Close()
		wait(t, p, "a full pool", full(1))
		m.mu.Lock()
		victim := m.made[0]
		m.mu.Unlock()
		close(victim.broken)
		wait(t, p, "the broken item replaced", func(st Stats) bool { return st.Broken == 1 && full(1)(st) })
		if !m.isReleased(victim) {
			t.Fatal("the broken item was not released")
		}
		if it, ok := p.Take(victim.lang, lim); !ok || it == victim {
			t.Fatalf("Take = %v, %v; want the replacement", it, ok)
		}
	})
}

// TestFailuresBackOffThenRecover: while Make fails the pool keeps trying,
// backing off, and fills once it works again.
func TestFailuresBackOffThenRecover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &maker{fail: true}
		p := New[*item](m, options(1))
		defer p.Close()
		time.Sleep(time.Minute)
		synctest.Wait()
		if st := p.Stats(); st.Made != 0 {
			t.Fatalf("Stats = %+v while Make fails", st)
		}
		m.mu.Lock()
		m.fail = false
		m.mu.Unlock()
		wait(t, p, "a full pool after the failures", full(1))
	})
}

// TestCloseReleasesEveryItem: Close releases the waiting items, and Take
// returns none afterwards.
func TestCloseReleasesEveryItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &maker{}
		p := New[*item](m, options(2))
		wait(t, p, "a full pool", full(2))
		taken, _ := p.Take("bash", lim)
		p.Close()
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, it := range m.made {
			if it != taken && !m.released[it] {
				t.Fatalf("a %s item was not released by Close", it.lang)
			}
		}
		if m.released[taken] {
			t.Fatal("Close released an item a run had taken")
		}
		if _, ok := p.Take("python", lim); ok {
			t.Fatal("Take after Close returned an item")
		}
	})
}

// TestKeeping: the pool says it does not keep up once a third of the last
// takes found no item ready, with how long making one takes, and that it
// does again once they find one.
func TestKeeping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &maker{slow: 100 * time.Millisecond}
		p := New[*item](m, options(1))
		defer p.Close()
		wait(t, p, "a full pool", full(1))
		if ok, _, _, _ := p.Keeping(); !ok || p.Warning("SIZE") != "" {
			t.Fatalf("a pool nothing took from says it does not keep up: %q", p.Warning("SIZE"))
		}
		for range recentTakes {
			// Back to back: all but the first find none ready.
			p.Take("python", lim)
		}
		ok, short, of, made := p.Keeping()
		if ok || short != of-1 || of != recentTakes || made != m.slow {
			t.Fatalf("Keeping = %v, %d of %d short, made in %v; want not keeping up, all but the first short, made in %v", ok, short, of, made, m.slow)
		}
		want := "the warm pool is not keeping up with the runs: 19 of the last 20 found no warm item ready and had their own created; " +
			"creating one takes about 100ms here, 1 at a time (SIZE=1), and runs that come faster than that wait for it"
		if w := p.Warning("SIZE"); w != want {
			t.Fatalf("Warning = %q\nwant      %q", w, want)
		}
		for range recentTakes {
			// With time between runs: each finds its item ready.
			wait(t, p, "a full pool", full(1))
			if _, ok := p.Take("python", lim); !ok {
				t.Fatal("a full pool handed out nothing")
			}
		}
		if ok, short, of, _ := p.Keeping(); !ok || short != 0 || of != recentTakes || p.Warning("SIZE") != "" {
			t.Fatalf("Keeping = %v, %d of %d short (%q); want keeping up", ok, short, of, p.Warning("SIZE"))
		}
	})
}
