// Package warmpool keeps sandboxes (containers, pods) of each language
// made and started ahead of demand, each to serve exactly one run.
//
// Rules:
//   - The pool never makes a run wait: when no warm item of the language
//     (with the run's container limits) is ready, Take returns none at once
//     and the run makes its own (cold). Keeping says when that happens to
//     many runs: the pool is not keeping up.
//   - Refilling happens in the background with at most Options.Parallel
//     items being made at once, so that the work of making them does not
//     starve the runs of CPU.
//   - A warm item that breaks before it is used (stopped, its stream ended,
//     deleted from outside) is released and replaced; while making fails,
//     refills back off, up to Options.MaxBackoff.
//   - An item is replaced after Options.MaxIdle, and used only when the
//     run's timeout ends before the item's deadline (plus Options.Grace), so
//     that nothing ever takes a live warm item for a leftover.
//
// The pool learns the container limits of its items from Options.Limits or,
// when that is the zero value, from the first Take; an item is made with
// them, and a run with other limits runs cold.
package warmpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// Item is one warm sandbox.
type Item interface {
	// Language is the language the item runs.
	Language() string
	// Limits are the container limits it was made with.
	Limits() sandbox.Limits
	// Deadline is when it stops being usable (it becomes a leftover).
	Deadline() time.Time
	// Broken is closed once the item can serve no run.
	Broken() <-chan struct{}
}

// Maker makes and releases items.
type Maker[T Item] interface {
	// Make makes an item of lang with the container limits lim and returns
	// once it is ready to take a program, or fails. ctx ends when the pool
	// closes.
	Make(ctx context.Context, lang string, lim sandbox.Limits) (T, error)
	// Release removes an item, in the background (it must not block).
	Release(T)
}

// Options configure a Pool.
type Options struct {
	// Size is how many items to keep per language; 0 keeps none.
	Size int
	// Languages are the languages to keep items of.
	Languages []string
	// Limits are the container limits of the items (see ContainerLimits);
	// the zero value means those of the first Take.
	Limits sandbox.Limits
	// Parallel bounds the items being made at once (at least 1).
	Parallel int
	// MaxIdle is how long an item may wait before it is replaced.
	MaxIdle time.Duration
	// Grace is added to a run's timeout: an item serves a run only if the
	// run ends, with it, before the item's deadline.
	Grace time.Duration
	// MaxBackoff bounds the wait between refills after failures.
	MaxBackoff time.Duration
	// Logger receives the pool's messages; What names an item in them
	// ("container", "pod").
	Logger *slog.Logger
	What   string
}

// ContainerLimits keeps the limits that are part of a sandbox's
// configuration (the timeout and the output cap are enforced by the
// server), which a warm item must match to serve a run.
func ContainerLimits(l sandbox.Limits) sandbox.Limits {
	return sandbox.Limits{
		MemoryBytes:   l.MemoryBytes,
		CPUs:          l.CPUs,
		Processes:     l.Processes,
		OpenFiles:     l.OpenFiles,
		FileSizeBytes: l.FileSizeBytes,
	}
}

// Pool keeps warm items. All methods are safe for concurrent use.
type Pool[T Item] struct {
	opts  Options
	maker Maker[T]

	sem    chan struct{} // refill slots
	kickC  chan struct{}
	ctx    context.Context // ends at Close: Make's context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the loop, makers and watchers

	mu       sync.Mutex
	changed  chan struct{}  // closed and replaced when items come or go
	known    bool           // limits is set
	limits   sandbox.Limits // container limits of the items
	warm     map[string][]*entry[T]
	filling  map[string]int
	closed   bool
	failures int
	retryAt  time.Time

	// Counters, for tests, logs and the benchmark.
	hits, misses, made, broken atomic.Int64

	// makeTime is how long making an item took lately (a moving average);
	// recent are the last takes: whether each found an item ready.
	makeTime time.Duration
	recent   []bool
}

// recentTakes is how many takes Keeping looks back on.
const recentTakes = 20

type entry[T Item] struct {
	item     T
	takeOnce sync.Once
	takenC   chan struct{} // closed when the item leaves the pool
}

func (e *entry[T]) take() { e.takeOnce.Do(func() { close(e.takenC) }) }

// New starts a pool; with Size 0 it keeps nothing and Take always returns
// none. The caller must Close it.
func New[T Item](maker Maker[T], opts Options) *Pool[T] {
	p := &Pool[T]{opts: opts, maker: maker, changed: make(chan struct{})}
	if opts.Size <= 0 {
		return p
	}
	if p.opts.Parallel < 1 {
		p.opts.Parallel = 1
	}
	if p.opts.Logger == nil {
		p.opts.Logger = slog.New(slog.DiscardHandler)
	}
	p.sem = make(chan struct{}, p.opts.Parallel)
	p.kickC = make(chan struct{}, 1)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.warm = map[string][]*entry[T]{}
	p.filling = map[string]int{}
	if cl := ContainerLimits(opts.Limits); cl != (sandbox.Limits{}) {
		p.known, p.limits = true, cl
	}
	p.wg.Add(1)
	go p.loop()
	p.kick()
	return p
}

func (p *Pool[T]) kick() {
	select {
	case p.kickC <- struct{}{}:
	default:
	}
}

// loop starts makers whenever the pool is short, until Close.
func (p *Pool[T]) loop() {
	defer p.wg.Done()
	for {
		var retry <-chan time.Time
		if d := p.refill(); d > 0 {
			retry = time.After(d)
		}
		select {
		case <-p.ctx.Done():
			return
		case <-p.kickC:
		case <-retry:
		}
	}
}

// refill starts the makers the pool is short of, one language after the
// other, and returns how long to wait before trying again after failures.
func (p *Pool[T]) refill() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !p.known {
		return 0
	}
	if d := time.Until(p.retryAt); d > 0 {
		return d
	}
	for round := range p.opts.Size {
		for _, lang := range p.opts.Languages {
			if len(p.warm[lang])+p.filling[lang] <= round {
				p.filling[lang]++
				p.wg.Add(1)
				go p.make(lang, p.limits)
			}
		}
	}
	return 0
}

// make makes one item and adds it to the pool.
func (p *Pool[T]) make(lang string, lim sandbox.Limits) {
	defer p.wg.Done()
	select {
	case p.sem <- struct{}{}:
	case <-p.ctx.Done():
		var none T
		p.add(lang, none, 0, errors.New("closed"))
		return
	}
	start := time.Now()
	item, err := p.maker.Make(p.ctx, lang, lim)
	<-p.sem
	p.add(lang, item, time.Since(start), err)
}

// add puts a new item in the pool, made in took, or releases it; err is
// why the item could not be made.
func (p *Pool[T]) add(lang string, item T, took time.Duration, err error) {
	ok := err == nil
	p.mu.Lock()
	p.filling[lang]--
	if ok {
		if p.makeTime == 0 {
			p.makeTime = took
		}
		p.makeTime = (3*p.makeTime + took) / 4
	}
	if err == nil && (p.closed || item.Limits() != p.limits) {
		err = errors.New("no longer wanted")
	}
	if err != nil {
		closed := p.closed
		if !closed {
			p.failures++
			d := min(p.opts.MaxBackoff, 100*time.Millisecond<<min(p.failures, 10))
			p.retryAt = time.Now().Add(d)
			if p.failures == 1 {
				p.opts.Logger.Warn("could not make a warm "+p.opts.What+"; runs go cold until it works again", "language", lang, "err", err, "retry_in", d)
			}
		}
		p.mu.Unlock()
		if ok {
			p.maker.Release(item)
		}
		if !closed {
			p.kick()
		}
		return
	}
	if p.failures > 0 {
		p.opts.Logger.Info("warm "+p.opts.What+"s are being made again", "language", lang, "after_failures", p.failures)
	}
	p.failures = 0
	e := &entry[T]{item: item, takenC: make(chan struct{})}
	p.warm[lang] = append(p.warm[lang], e)
	p.changedLocked()
	p.made.Add(1)
	p.wg.Add(1)
	go p.watch(e)
	p.mu.Unlock()
}

// watch replaces an item that breaks or grows old while it waits.
func (p *Pool[T]) watch(e *entry[T]) {
	defer p.wg.Done()
	idle := time.NewTimer(p.opts.MaxIdle)
	defer idle.Stop()
	broke := true
	select {
	case <-e.takenC:
		return
	case <-p.ctx.Done():
		return // Close releases it
	case <-e.item.Broken():
	case <-idle.C:
		broke = false
	}
	if p.remove(e, broke) {
		if broke {
			p.opts.Logger.Info("a warm "+p.opts.What+" broke while waiting; replacing it", "language", e.item.Language())
		}
		p.maker.Release(e.item)
		p.kick()
	}
}

// remove takes e out of the pool, counting it as broken when it broke;
// false when a run already took it.
func (p *Pool[T]) remove(e *entry[T], broke bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	lang := e.item.Language()
	q := p.warm[lang]
	i := slices.Index(q, e)
	if i < 0 {
		return false
	}
	p.warm[lang] = slices.Delete(q, i, i+1)
	if broke {
		p.broken.Add(1)
	}
	p.changedLocked()
	e.take()
	return true
}

// changedLocked tells Wait that items came or went; the caller holds mu.
func (p *Pool[T]) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Take returns a warm item of lang that suits lim, or false at once when
// there is none. The caller owns (and releases) what it takes.
func (p *Pool[T]) Take(lang string, lim sandbox.Limits) (T, bool) {
	var none T
	if p.opts.Size <= 0 {
		return none, false
	}
	key := ContainerLimits(lim)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return none, false
	}
	if !p.known {
		p.known, p.limits = true, key
		p.missLocked()
		p.kick()
		return none, false
	}
	if key != p.limits || lim.Timeout <= 0 {
		p.misses.Add(1)
		return none, false
	}
	got := p.popLocked(lang, time.Now().Add(lim.Timeout+p.opts.Grace))
	if got == nil {
		p.missLocked()
		return none, false
	}
	p.hits.Add(1)
	p.recordLocked(true)
	return got.item, true
}

// popLocked takes a warm item of lang usable until need out of the pool,
// or returns nil; either way the pool refills. The caller holds mu.
func (p *Pool[T]) popLocked(lang string, need time.Time) *entry[T] {
	q := p.warm[lang]
	var got *entry[T]
	for i := 0; i < len(q); {
		e := q[i]
		switch {
		case isClosed(e.item.Broken()):
			q = slices.Delete(q, i, i+1)
			e.take()
			p.broken.Add(1)
			p.maker.Release(e.item)
			continue
		case need.After(e.item.Deadline()):
			i++
			continue
		}
		q = slices.Delete(q, i, i+1)
		got = e
		break
	}
	p.warm[lang] = q
	p.changedLocked()
	p.kick()
	if got != nil {
		got.take()
	}
	return got
}

// missLocked counts a take that found no item; the caller holds mu.
func (p *Pool[T]) missLocked() {
	p.misses.Add(1)
	p.recordLocked(false)
}

// recordLocked remembers whether a take found an item ready; the caller
// holds mu.
func (p *Pool[T]) recordLocked(ready bool) {
	p.recent = append(p.recent, ready)
	if len(p.recent) > recentTakes {
		p.recent = p.recent[len(p.recent)-recentTakes:]
	}
}

// Keeping says whether the pool keeps up with the runs: false when a third
// or more of the last 20 takes (of 10 or more) found no item ready, with how
// many found none and how long making one has taken lately. (Back to back,
// a pool that cannot keep up serves about every other run: the cold run
// and the refill overlap.)
func (p *Pool[T]) Keeping() (ok bool, short, of int, makeTime time.Duration) {
	if p.opts.Size <= 0 {
		return true, 0, 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ready := range p.recent {
		if !ready {
			short++
		}
	}
	of = len(p.recent)
	return of < recentTakes/2 || 3*short < of, short, of, p.makeTime
}

// Warning is what sandbox_info says while the pool does not keep up (see
// Keeping), "" while it does; sizeVar names the setting of its size.
func (p *Pool[T]) Warning(sizeVar string) string {
	ok, short, of, made := p.Keeping()
	if ok {
		return ""
	}
	return fmt.Sprintf("the warm pool is not keeping up with the runs: %d of the last %d found no warm %s ready and had their own created; "+
		"creating one takes about %v here, %d at a time (%s=%d), and runs that come faster than that wait for it",
		short, of, p.opts.What, made.Round(time.Millisecond), p.opts.Parallel, sizeVar, p.opts.Size)
}

// Ready returns how many items of lang wait in the pool.
func (p *Pool[T]) Ready(lang string) int {
	if p.opts.Size <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.warm[lang])
}

// Wait waits until cond holds for the pool's Stats, which it checks again
// whenever items come, go or break, or until ctx ends (its error then).
func (p *Pool[T]) Wait(ctx context.Context, cond func(Stats) bool) error {
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		st := p.Stats()
		if cond(st) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("the warm pool did not get there (ready: %v, made %d, broken %d): %w", st.Ready, st.Made, st.Broken, ctx.Err())
		}
	}
}

// Close stops refilling, releases every waiting item and waits for the
// pool's goroutines (Make included). Safe to call more than once.
func (p *Pool[T]) Close() {
	if p.opts.Size <= 0 {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var all []*entry[T]
	for _, q := range p.warm {
		all = append(all, q...)
	}
	p.warm = map[string][]*entry[T]{}
	p.mu.Unlock()
	p.cancel()
	for _, e := range all {
		e.take()
		p.maker.Release(e.item)
	}
	p.wg.Wait()
}

// Stats is what a pool reports (for metrics).
type Stats struct {
	// Ready counts the items waiting, by language.
	Ready map[string]int
	// Hits and Misses count runs that took an item and runs that found
	// none, since start.
	Hits, Misses int64
	// Made and Broken count the items made, and those that broke while
	// waiting (or were found broken when taken).
	Made, Broken int64
}

// Stats reports the pool: cheap, and safe for concurrent use. Without
// items (Size 0) every count is zero.
func (p *Pool[T]) Stats() Stats {
	st := Stats{Ready: map[string]int{}}
	if p.opts.Size <= 0 {
		return st
	}
	for _, l := range p.opts.Languages {
		st.Ready[l] = p.Ready(l)
	}
	st.Hits, st.Misses, st.Made, st.Broken = p.hits.Load(), p.misses.Load(), p.made.Load(), p.broken.Load()
	return st
}

// Languages are the languages of enabled that the image has (interps), in
// sandbox.LanguageNames order: those a pool keeps items of.
func Languages[V any](interps map[string]V, enabled []string) []string {
	var out []string
	for _, l := range sandbox.LanguageNames() {
		if _, ok := interps[l]; ok && slices.Contains(enabled, l) {
			out = append(out, l)
		}
	}
	return out
}
