package docker

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// The warm pool.
//
// For each enabled language the pool keeps Config.PoolSize run containers
// created, started and ready: the supervisor is running and the interpreter
// is loaded and blocked reading its program from the attached stdin, with the
// attach stream and the exit wait already established. A run takes one
// without any engine call, writes its program and reads the answer; the
// container is then removed in the background, and the pool creates a new one.
// A container serves exactly one run: nothing of one run (files, processes,
// memory) can reach another, because the next run is in another container.
//
// Rules:
//   - The pool never makes a run wait: when no warm container of the
//     language (with the run's container limits) is ready, the run gets a
//     cold container at once.
//   - Refilling happens in the background with at most refillParallel
//     containers being created at once, so that the engine's work does not
//     starve the runs of CPU.
//   - A warm container that stops, or whose stream ends, before it is used
//     (engine restart, docker rm -f) is removed and replaced; while the engine
//     does not answer, refills back off. A run whose warm container breaks
//     before it took the program runs cold instead, so a pool fault never
//     reaches the caller.
//   - Warm containers carry the role "pool" and a deadline of poolLease from
//     their creation; the pool replaces them after poolMaxIdle, and uses one
//     only when the run's timeout ends before the deadline. Another codeexec
//     therefore never takes a live warm container for a leftover, while a
//     crashed server's warm containers stop by themselves (StdinOnce: the end
//     of its attach stream closes their stdin) and are removed by the next
//     codeexec that starts or reaps. Close removes them all.
const (
	poolLease        = 30 * time.Minute
	poolMaxIdle      = 10 * time.Minute
	poolReadyTimeout = engineTimeout
	refillMaxBackoff = 10 * time.Second
)

// refillParallel bounds the containers being created for the pool at once:
// creating one keeps the engine busy on about one CPU.
var refillParallel = max(1, runtime.NumCPU()/2)

// pool keeps warm run containers. All methods are safe for concurrent use.
type pool struct {
	r     *Runner
	size  int
	langs []string

	sem   chan struct{} // refill slots
	kickC chan struct{}
	stopC chan struct{}
	wg    sync.WaitGroup // the loop, creators and watchers

	mu       sync.Mutex
	known    bool           // limits is set
	limits   sandbox.Limits // container limits of the warm containers
	warm     map[string][]*session
	filling  map[string]int
	closed   bool
	failures int
	retryAt  time.Time

	// Counters, for tests, logs and the benchmark.
	hits, misses, created, broken atomic.Int64
}

func newPool(r *Runner, size int, lim sandbox.Limits) *pool {
	p := &pool{r: r, size: size}
	if size <= 0 {
		return p
	}
	for _, l := range sandbox.LanguageNames() {
		if _, ok := r.interps[l]; ok && slices.Contains(r.cfg.Languages, l) {
			p.langs = append(p.langs, l)
		}
	}
	p.sem = make(chan struct{}, refillParallel)
	p.kickC = make(chan struct{}, 1)
	p.stopC = make(chan struct{})
	p.warm = map[string][]*session{}
	p.filling = map[string]int{}
	if cl := containerLimits(lim); cl != (sandbox.Limits{}) {
		p.known, p.limits = true, cl
	}
	p.wg.Add(1)
	go p.loop()
	p.kick()
	return p
}

func (p *pool) kick() {
	select {
	case p.kickC <- struct{}{}:
	default:
	}
}

// loop starts creations whenever the pool is short, until close.
func (p *pool) loop() {
	defer p.wg.Done()
	for {
		var retry <-chan time.Time
		if d := p.refill(); d > 0 {
			retry = time.After(d)
		}
		select {
		case <-p.stopC:
			return
		case <-p.kickC:
		case <-retry:
		}
	}
}

// refill starts the creations the pool is short of, one language after the
// other, and returns how long to wait before trying again after failures.
func (p *pool) refill() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !p.known {
		return 0
	}
	if d := time.Until(p.retryAt); d > 0 {
		return d
	}
	for round := range p.size {
		for _, lang := range p.langs {
			if len(p.warm[lang])+p.filling[lang] <= round {
				p.filling[lang]++
				p.wg.Add(1)
				go p.create(lang, p.limits)
			}
		}
	}
	return 0
}

// create makes one warm container and adds it to the pool once its
// interpreter is ready.
func (p *pool) create(lang string, lim sandbox.Limits) {
	defer p.wg.Done()
	select {
	case p.sem <- struct{}{}:
	case <-p.stopC:
		p.add(lang, nil, errors.New("closed"))
		return
	}
	s, err := p.r.start(context.Background(), p.r.runSpec(lang, lim, rolePool, time.Now().Add(poolLease), nil), lang)
	if err == nil {
		t := time.NewTimer(poolReadyTimeout)
		select {
		case <-s.out.Ready:
		case <-s.exitedC:
			err = errors.New("the container stopped before its interpreter was ready")
		case <-s.readC:
			err = errors.New("the container's stream ended before its interpreter was ready")
		case <-t.C:
			err = errors.New("the interpreter was not ready in time")
		case <-p.stopC:
			err = errors.New("closed")
		}
		t.Stop()
	}
	<-p.sem
	p.add(lang, s, err)
}

// add puts a new warm container in the pool, or releases it.
func (p *pool) add(lang string, s *session, err error) {
	p.mu.Lock()
	p.filling[lang]--
	if err == nil && (p.closed || s.limits != p.limits) {
		err = errors.New("no longer wanted")
	}
	if err != nil {
		closed := p.closed
		if !closed {
			p.failures++
			d := min(refillMaxBackoff, 100*time.Millisecond<<min(p.failures, 10))
			p.retryAt = time.Now().Add(d)
			if p.failures == 1 {
				p.r.log.Warn("could not make a warm container; runs go cold until the engine recovers", "language", lang, "err", err, "retry_in", d)
			}
		}
		p.mu.Unlock()
		if s != nil {
			p.r.release(s)
		}
		if !closed {
			p.kick()
		}
		return
	}
	if p.failures > 0 {
		p.r.log.Info("warm containers are being made again", "language", lang, "after_failures", p.failures)
	}
	p.failures = 0
	p.warm[lang] = append(p.warm[lang], s)
	p.created.Add(1)
	p.wg.Add(1)
	go p.watch(s)
	p.mu.Unlock()
}

// watch replaces a warm container that breaks or grows old while it waits.
func (p *pool) watch(s *session) {
	defer p.wg.Done()
	idle := time.NewTimer(poolMaxIdle)
	defer idle.Stop()
	broke := true
	select {
	case <-s.takenC:
		return
	case <-p.stopC:
		return // close releases it
	case <-s.exitedC:
	case <-s.readC:
	case <-idle.C:
		broke = false
	}
	if p.remove(s) {
		if broke {
			p.broken.Add(1)
			p.r.log.Info("a warm container stopped while waiting; replacing it", "id", shortID(s.id), "language", s.lang)
		}
		p.r.release(s)
		p.kick()
	}
}

// remove takes s out of the pool; false when a run already took it.
func (p *pool) remove(s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.warm[s.lang]
	i := slices.Index(q, s)
	if i < 0 {
		return false
	}
	p.warm[s.lang] = slices.Delete(q, i, i+1)
	s.take()
	return true
}

// take returns a warm container of lang that suits lim, or nil at once
// when there is none. The caller releases it.
func (p *pool) take(lang string, lim sandbox.Limits) *session {
	if p.size <= 0 {
		return nil
	}
	key := containerLimits(lim)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if !p.known {
		p.known, p.limits = true, key
		p.misses.Add(1)
		p.kick()
		return nil
	}
	if key != p.limits || lim.Timeout <= 0 {
		p.misses.Add(1)
		return nil
	}
	need := time.Now().Add(lim.Timeout + leftoverGrace)
	q := p.warm[lang]
	var got *session
	for i := 0; i < len(q); {
		s := q[i]
		switch {
		case s.broken():
			q = slices.Delete(q, i, i+1)
			s.take()
			p.broken.Add(1)
			p.r.release(s)
			continue
		case need.After(s.deadline):
			i++
			continue
		}
		q = slices.Delete(q, i, i+1)
		got = s
		break
	}
	p.warm[lang] = q
	p.kick()
	if got == nil {
		p.misses.Add(1)
		return nil
	}
	got.take()
	p.hits.Add(1)
	return got
}

// ready returns how many warm containers of lang wait in the pool.
func (p *pool) ready(lang string) int {
	if p.size <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.warm[lang])
}

// close stops refilling, releases every warm container and waits for the
// pool's goroutines. The caller then waits for the releases.
func (p *pool) close() {
	if p.size <= 0 {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var all []*session
	for _, q := range p.warm {
		all = append(all, q...)
	}
	p.warm = map[string][]*session{}
	p.mu.Unlock()
	close(p.stopC)
	for _, s := range all {
		p.r.release(s)
	}
	p.wg.Wait()
}

// PoolStats is what the warm pool reports (for metrics).
type PoolStats struct {
	// Ready counts the warm containers waiting, by language.
	Ready map[string]int
	// Hits and Misses count runs that took a warm container and runs
	// that found none, since start.
	Hits, Misses int64
}

// PoolStats reports the warm pool: cheap, and safe for concurrent use.
// Without a pool (PoolSize 0) every count is zero.
func (r *Runner) PoolStats() PoolStats {
	p := r.pool
	st := PoolStats{Ready: map[string]int{}}
	if p == nil || p.size <= 0 {
		return st
	}
	for _, l := range p.langs {
		st.Ready[l] = p.ready(l)
	}
	st.Hits, st.Misses = p.hits.Load(), p.misses.Load()
	return st
}
