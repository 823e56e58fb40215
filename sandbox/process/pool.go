package process

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// A run's fixed costs are paid ahead of demand, as docker mode's warm pool
// does for containers: the run's host user, its cgroups, its directories
// and its supervisor, started in the run's namespaces with the exec stage
// waiting, already in the cgroups; and, for python and javascript, the
// interpreter itself, started in the run's final sandbox and waiting for
// its program (see preload.go). A prepared run serves one request and is
// then gone like any run; a new one is prepared in the background. What is
// left for the request is its own work: the program file and its files,
// and for a supervisor alone the minimal root and the interpreter's start.

// slot is what one run runs in: its guard (host user, cgroups), its
// directories, and, for a prepared run, its waiting supervisor.
type slot struct {
	r          *Runner
	g          *runGuard
	dir, root  string
	prep       *executor.Prepared
	owner      *executor.Owner
	programSet bool
	// key is what the prepared run was made for; spec, with an
	// interpreter started ahead (key.lang set), is its Spec.
	key  poolKey
	spec *executor.Spec
	// since is when it joined the pool.
	since time.Time
}

// end gives back what the slot holds; clean says the run ended normally.
func (s *slot) end(clean bool) {
	if s.prep != nil {
		s.prep.Close()
	}
	if s.root != "" {
		_ = executor.RemoveAll(s.root)
	}
	if s.dir != "" {
		if err := executor.RemoveAll(s.dir); err != nil {
			s.r.log.Error("could not remove a run directory", "dir", s.dir, "err", err)
		}
	}
	if s.g != nil {
		s.g.end(clean)
	}
}

// loaded reports whether the slot's interpreter was started ahead and has
// loaded.
func (s *slot) loaded() bool {
	if s.spec == nil {
		return false
	}
	select {
	case <-s.prep.Loaded():
		return true
	default:
		return false
	}
}

// newSlot takes the run's host user and cgroups (waiting for a free user if
// wait is set, giving up with nil otherwise) and makes its directories.
func (r *Runner) newSlot(ctx context.Context, lim sandbox.Limits, wait bool) (*slot, error) {
	return r.newSlotIn(ctx, lim, wait, "run-")
}

// newSlotIn is newSlot with the directory's name prefix: "run-" for a run
// of a request, "prepared-" for one made ahead of demand.
func (r *Runner) newSlotIn(ctx context.Context, lim sandbox.Limits, wait bool, dirPrefix string) (*slot, error) {
	g, err := r.guardFor(ctx, lim, wait)
	if err != nil || g == nil {
		return nil, err
	}
	s := &slot{r: r, g: g}
	if s.dir, err = os.MkdirTemp(r.root, dirPrefix); err != nil {
		s.end(false)
		return nil, fmt.Errorf("%w: creating the run directory: %v", sandbox.ErrSandboxUnavailable, err)
	}
	if uid, gid, ok := g.owner(); ok {
		if err := os.Chown(s.dir, uid, gid); err != nil {
			s.end(false)
			return nil, fmt.Errorf("%w: handing the run directory to the sandbox user: %v", sandbox.ErrSandboxUnavailable, err)
		}
		s.owner = &executor.Owner{UID: uid, GID: gid}
	}
	if g.iso.Mount {
		if s.root, err = r.makeRootDir(g.iso); err != nil {
			s.end(false)
			return nil, err
		}
	}
	return s, nil
}

// isolation is the slot's isolation, its root directory filled in.
func (s *slot) isolation() executor.Isolation {
	iso := s.g.iso
	iso.RootDir = s.root
	return iso
}

// base is what a prepared supervisor must know before its run (see
// executor.Prepare); the run's Spec repeats it.
func (s *slot) base() executor.Spec {
	spec := executor.Spec{
		Isolation:   s.isolation(),
		Dir:         s.dir,
		Rlimits:     true,
		Credential:  s.g.cred,
		NoNewPrivs:  true,
		CgroupProcs: s.g.cgroupProcs(),
	}
	if s.r.egress != nil {
		spec.EgressAddr = EgressAddr
	}
	return spec
}

// preloadSpec is the Spec of the slot's interpreter of k.lang, started
// ahead under k.lim (see executor.Preload): the Spec of any run of that
// language (programSpec), but for the request.
func (s *slot) preloadSpec(k poolKey) (executor.Spec, error) {
	r := s.r
	file := filepath.Join(s.dir, sandbox.Languages[k.lang].FileName)
	p := executor.Program{Lang: k.lang, Dir: s.dir, Path: r.interp[k.lang].Path, Args: preloadArgs(k.lang, file, r.pythonAhead), Limits: k.lim}
	if r.egress != nil {
		// The run's own part of the proxy serves the listener at the
		// hand-over (runIn); this one is never called.
		p.Serve = func(l net.Listener) { l.Close() }
	}
	spec, err := r.programSpec(s.g, s.isolation(), p)
	spec.Preload = &executor.Preload{}
	return spec, err
}

// writeProgram writes the program file into the slot's directory.
func (s *slot) writeProgram(fileName, code string) (string, error) {
	file := filepath.Join(s.dir, fileName)
	if err := os.WriteFile(file, []byte(code), 0o644); err != nil {
		return "", fmt.Errorf("%w: writing the program: %v", sandbox.ErrSandboxUnavailable, err)
	}
	return file, nil
}

// poolKey is what a prepared run is made for: a language and the run's
// limits (all but the output cap, which only the server enforces) for an
// interpreter started ahead; the zero key for a supervisor alone, which
// serves any request.
type poolKey struct {
	lang string
	lim  sandbox.Limits
}

// keyOf is the key of an interpreter of lang started ahead for lim.
func keyOf(lang string, lim sandbox.Limits) poolKey {
	lim.OutputBytes = 0
	return poolKey{lang: lang, lim: lim}
}

// warmPool holds prepared runs. A size of 0 prepares nothing.
//
// It keeps, for each key that requests asked for lately (see demand), as
// many prepared runs as the demand's target (most in all), starting at
// most parallel at once. A request takes a run of its key; when none is there but one is
// being prepared, it waits for that one, which is further along than any it
// could start; otherwise it takes a supervisor alone, or starts its run on
// demand. A key whose interpreter dies before its run, three times in a
// row, is not started ahead again: its requests run as the others do.
type warmPool struct {
	r        *Runner
	parallel int
	// most bounds the prepared runs of every key together (each holds a
	// host user, cgroups and memory).
	most int

	// taken counts the requests served by a prepared run; loaded, those
	// whose interpreter had loaded before they came.
	taken, loaded atomic.Int64

	mu        sync.Mutex
	demand    *demand
	idle      map[poolKey][]*slot
	filling   map[poolKey]int
	preparing int
	failed    map[poolKey]int
	closed    bool
	wg        sync.WaitGroup
	// changed is closed, and replaced, whenever a preparation ends (with
	// a prepared run or without) or a run leaves the pool: waiters and
	// tests wait on it, not on a clock.
	changed chan struct{}
	stop    chan struct{}
}

// trimEvery is how often the pool lets go of prepared runs that the
// demand no longer wants.
const trimEvery = 5 * time.Second

// maxPrepared bounds the prepared runs of a pool.
const maxPrepared = 16

// newWarmPool starts a pool of size prepared runs per key, with the keys
// wanted from the start (see demand).
func newWarmPool(r *Runner, size int, wanted []poolKey) *warmPool {
	most := maxPrepared
	if r.uids != nil {
		// Half the host users at most: runs must find one.
		most = max(1, min(most, r.uidRange.Size()/2))
	}
	p := &warmPool{
		r:        r,
		most:     most,
		parallel: max(1, runtime.NumCPU()),
		demand:   newDemand(size, max(size, 2*runtime.NumCPU()), wanted, time.Now()),
		idle:     map[poolKey][]*slot{},
		filling:  map[poolKey]int{},
		failed:   map[poolKey]int{},
		changed:  make(chan struct{}),
		stop:     make(chan struct{}),
	}
	p.wg.Add(1)
	go p.trimLoop()
	p.fill()
	return p
}

// changedLocked wakes the waiters; the caller holds mu.
func (p *warmPool) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// take returns a prepared run for a request of key k, or nil when none is
// ready or coming; either way the pool goes on preparing what the demand
// wants. A request that cannot use an interpreter started ahead has the
// zero key.
func (p *warmPool) take(ctx context.Context, k poolKey) *slot {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	if p.failed[k] >= 3 {
		k = poolKey{}
	}
	s := p.popLocked(k)
	hit := s != nil && (k == poolKey{} || s.loaded())
	p.demand.asked(k, time.Now(), hit)
	if hit {
		p.failed[k] = 0
	}
	for s == nil && k != (poolKey{}) && p.filling[k] > 0 && !p.closed {
		changed := p.changed
		p.mu.Unlock()
		p.fill()
		select {
		case <-changed:
		case <-ctx.Done():
			p.fill()
			return nil
		}
		p.mu.Lock()
		s = p.popLocked(k)
	}
	if s == nil {
		s = p.popLocked(poolKey{})
	}
	p.mu.Unlock()
	p.fill()
	if s != nil {
		p.taken.Add(1)
		if s.loaded() {
			p.loaded.Add(1)
		}
	}
	return s
}

// popLocked takes the first prepared run of k that is still alive, one
// whose interpreter has loaded first; the caller holds mu.
func (p *warmPool) popLocked(k poolKey) *slot {
	q := p.idle[k]
	for i := 0; i < len(q); {
		if !q[i].prep.Alive() {
			// Killed while it waited: discard it.
			s := q[i]
			q = slices.Delete(q, i, i+1)
			p.diedLocked(s)
			go s.end(false)
			continue
		}
		i++
	}
	i := slices.IndexFunc(q, (*slot).loaded)
	if i < 0 && len(q) > 0 {
		i = 0
	}
	if i < 0 {
		p.idle[k] = q
		return nil
	}
	s := q[i]
	p.idle[k] = slices.Delete(q, i, i+1)
	p.changedLocked()
	return s
}

// diedLocked counts a prepared run of an interpreter started ahead that
// died before its run; the caller holds mu.
func (p *warmPool) diedLocked(s *slot) {
	if s.key == (poolKey{}) {
		return
	}
	if p.failed[s.key]++; p.failed[s.key] == 3 {
		p.r.log.Warn("the interpreter started ahead of its run keeps ending before it; its runs start it themselves", "language", s.key.lang)
	}
}

// notBegun tells the pool that the run of s never began: its interpreter,
// started ahead, died before it took the run.
func (p *warmPool) notBegun(s *slot) {
	p.mu.Lock()
	p.diedLocked(s)
	p.mu.Unlock()
}

// fill prepares runs in the background until the pool holds what the
// demand wants, at most parallel at once.
func (p *warmPool) fill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	total := p.preparing
	for _, q := range p.idle {
		total += len(q)
	}
	for _, w := range p.demand.targets(time.Now()) {
		if p.failed[w.key] >= 3 {
			continue
		}
		for len(p.idle[w.key])+p.filling[w.key] < w.target && p.preparing < p.parallel && total < p.most {
			total++
			p.filling[w.key]++
			p.preparing++
			p.wg.Add(1)
			go p.prepareOne(w.key)
		}
	}
}

// prepareOne prepares a run of k and puts it in the pool. A run that could
// not be prepared starts no other (a host where preparing fails does not
// spin): the next request tries again.
func (p *warmPool) prepareOne(k poolKey) {
	defer p.wg.Done()
	s := p.prepare(k)
	p.mu.Lock()
	p.filling[k]--
	p.preparing--
	keep := s != nil && !p.closed
	if keep {
		s.since = time.Now()
		p.idle[k] = append(p.idle[k], s)
	}
	if keep && s.spec != nil {
		p.wg.Add(1)
		go p.watch(s)
	}
	p.changedLocked()
	p.mu.Unlock()
	if s != nil && !keep {
		s.end(true)
	}
	if keep {
		p.fill()
	}
}

// watch discards a prepared run whose interpreter, started ahead, died
// before it loaded, while it waits in the pool.
func (p *warmPool) watch(s *slot) {
	defer p.wg.Done()
	select {
	case <-s.prep.Failed():
	case <-s.prep.Loaded():
		return
	case <-p.stop:
		return
	}
	p.mu.Lock()
	q := p.idle[s.key]
	i := slices.Index(q, s)
	if i >= 0 {
		p.idle[s.key] = slices.Delete(q, i, i+1)
		p.diedLocked(s)
		p.changedLocked()
	}
	p.mu.Unlock()
	if i >= 0 {
		s.end(false)
		p.fill()
	}
}

// prepare makes one prepared run of k, or returns nil (no free host user,
// or the supervisor could not start: requests then start theirs on
// demand).
func (p *warmPool) prepare(k poolKey) *slot {
	r := p.r
	// A supervisor alone gets the request's limits at the hand-over.
	s, err := r.newSlotIn(context.Background(), k.lim, false, "prepared-")
	if err != nil || s == nil {
		if err != nil {
			r.log.Debug("could not prepare a run", "err", err)
		}
		return nil
	}
	s.key = k
	spec := s.base()
	if k.lang != "" {
		if spec, err = s.preloadSpec(k); err == nil {
			s.spec = &spec
		}
	}
	if err == nil {
		s.prep, err = executor.Prepare(spec)
	}
	if err != nil {
		r.log.Debug("could not prepare a run", "err", err)
		s.end(false)
		return nil
	}
	return s
}

// trimLoop lets go, every trimEvery, of the prepared runs beyond what the
// demand wants, until the pool closes.
func (p *warmPool) trimLoop() {
	defer p.wg.Done()
	t := time.NewTicker(trimEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		var drop []*slot
		p.mu.Lock()
		now := time.Now()
		for k, q := range p.idle {
			if len(q) > 0 && now.Sub(q[0].since) > shrinkAfter {
				// The oldest waited long: one fewer is enough.
				p.demand.idle(k)
			}
		}
		wanted := map[poolKey]int{}
		for _, w := range p.demand.targets(now) {
			wanted[w.key] = w.target
		}
		for k, q := range p.idle {
			for len(q) > 0 && len(q)+p.filling[k] > wanted[k] {
				drop = append(drop, q[0])
				q = q[1:]
			}
			p.idle[k] = q
		}
		if len(drop) > 0 {
			p.changedLocked()
		}
		p.mu.Unlock()
		for _, s := range drop {
			s.end(true)
		}
	}
}

// close discards the prepared runs and waits for those being prepared.
func (p *warmPool) close() {
	p.mu.Lock()
	p.closed = true
	var idle []*slot
	for _, q := range p.idle {
		idle = append(idle, q...)
	}
	p.idle = map[poolKey][]*slot{}
	p.mu.Unlock()
	close(p.stop)
	p.wg.Wait()
	for _, s := range idle {
		s.end(true)
	}
}
