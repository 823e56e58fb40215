package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// A run's fixed costs are paid ahead of demand, as docker mode's warm pool
// does for containers: the run's host user, its cgroups, its directories
// and its supervisor, started in the run's namespaces with the exec stage
// waiting, already in the cgroups. A prepared run serves one request and is
// then gone like any run; a new one is prepared in the background. What is
// left for the request is its own work: the program file, the minimal root,
// the program.

// slot is what one run runs in: its guard (host user, cgroups), its
// directories, and, for a prepared run, its waiting supervisor.
type slot struct {
	r          *Runner
	g          *runGuard
	dir, root  string
	prep       *executor.Prepared
	owner      *executor.Owner
	programSet bool
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

// writeProgram writes the program file into the slot's directory.
func (s *slot) writeProgram(fileName, code string) (string, error) {
	file := filepath.Join(s.dir, fileName)
	if err := os.WriteFile(file, []byte(code), 0o644); err != nil {
		return "", fmt.Errorf("%w: writing the program: %v", sandbox.ErrSandboxUnavailable, err)
	}
	return file, nil
}

// warmPool holds prepared runs. A size of 0 prepares nothing.
type warmPool struct {
	r    *Runner
	size int

	// taken counts the requests served by a prepared run.
	taken atomic.Int64

	mu      sync.Mutex
	idle    []*slot
	filling int
	closed  bool
	wg      sync.WaitGroup
	// changed is closed, and replaced, whenever a preparation ends (with
	// a prepared run or without): tests wait on it, not on a clock.
	changed chan struct{}
}

func newWarmPool(r *Runner, size int) *warmPool {
	p := &warmPool{r: r, size: size, changed: make(chan struct{})}
	p.fill()
	return p
}

// take returns a prepared run, or nil when none is ready; either way it
// starts preparing the next.
func (p *warmPool) take() *slot {
	p.mu.Lock()
	var s *slot
	for len(p.idle) > 0 && s == nil {
		s = p.idle[0]
		p.idle = p.idle[1:]
		if !s.prep.Alive() {
			// Killed while it waited: discard it.
			go s.end(false)
			s = nil
		}
	}
	p.mu.Unlock()
	if s != nil {
		p.taken.Add(1)
	}
	p.fill()
	return s
}

// fill prepares runs in the background until the pool is full.
func (p *warmPool) fill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	// One at a time, each finished one starting the next: a host where
	// preparing fails does not spin.
	if !p.closed && len(p.idle)+p.filling < p.size {
		p.filling++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			s := p.prepare()
			p.mu.Lock()
			p.filling--
			keep := s != nil && !p.closed
			if keep {
				p.idle = append(p.idle, s)
			}
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
			if s != nil && !keep {
				s.end(true)
			}
			if keep {
				p.fill()
			}
		}()
	}
}

// prepare makes one prepared run, or returns nil (no free host user, or
// the supervisor could not start: requests then start theirs on demand).
func (p *warmPool) prepare() *slot {
	r := p.r
	// The limits are the request's, set at the hand-over.
	s, err := r.newSlotIn(context.Background(), sandbox.Limits{}, false, "prepared-")
	if err != nil || s == nil {
		if err != nil {
			r.log.Debug("could not prepare a run", "err", err)
		}
		return nil
	}
	if s.prep, err = executor.Prepare(s.base()); err != nil {
		r.log.Debug("could not prepare a run", "err", err)
		s.end(false)
		return nil
	}
	return s
}

// close discards the prepared runs and waits for those being prepared.
func (p *warmPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.wg.Wait()
	for _, s := range idle {
		s.end(true)
	}
}
