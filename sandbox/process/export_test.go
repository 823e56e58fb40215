package process

import (
	"context"
	"errors"

	"github.com/codeexec/codeexec/sandbox"
)

// RunOnDemand runs req as Run does, but always on a run started for it,
// never on one prepared ahead.
func RunOnDemand(ctx context.Context, r *Runner, req sandbox.Request) (*sandbox.Result, error) {
	spec, in, err := sandbox.Lookup(req.Language, r.interp, r.caps.Languages)
	if err != nil {
		return nil, err
	}
	ctx, end, err := r.runs.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	s, err := r.newSlot(ctx, req.Limits, true)
	if err != nil {
		return nil, err
	}
	return r.runIn(ctx, s, req, spec, in)
}

// PreparedTaken is how many requests a prepared run served.
func PreparedTaken(r *Runner) int64 {
	if r.pool == nil {
		return 0
	}
	return r.pool.taken.Load()
}

// LoadedTaken is how many requests an interpreter started ahead served
// that had loaded before they came.
func LoadedTaken(r *Runner) int64 {
	if r.pool == nil {
		return 0
	}
	return r.pool.loaded.Load()
}

// WaitPrepared waits until a prepared run waits in the pool, and returns
// its supervisor's pid. It fails when the pool is idle with nothing
// prepared (preparing failed), or when ctx ends.
func WaitPrepared(ctx context.Context, r *Runner) (int, error) {
	return waitPool(ctx, r, func(s *slot) bool { return true })
}

// WaitLoaded waits until a run whose interpreter of lang was started ahead
// waits in the pool, loaded, and returns its supervisor's pid.
func WaitLoaded(ctx context.Context, r *Runner, lang string) (int, error) {
	return waitPool(ctx, r, func(s *slot) bool { return s.key.lang == lang && s.loaded() })
}

// waitPool waits until a prepared run for which ok holds waits in the
// pool, and returns its supervisor's pid.
func waitPool(ctx context.Context, r *Runner, ok func(*slot) bool) (int, error) {
	if r.pool == nil {
		return 0, errors.New("the runner has no pool")
	}
	for {
		r.pool.mu.Lock()
		pid, filling, changed := 0, r.pool.preparing, r.pool.changed
		var loading []<-chan struct{}
		for _, q := range r.pool.idle {
			for _, s := range q {
				if pid == 0 && ok(s) {
					pid = s.prep.PID()
				}
				if s.spec != nil && !s.loaded() {
					loading = append(loading, s.prep.Loaded())
				}
			}
		}
		r.pool.mu.Unlock()
		switch {
		case pid != 0:
			return pid, nil
		case filling == 0 && len(loading) == 0:
			return 0, errors.New("nothing is prepared and nothing is being prepared")
		}
		// A preparation ends, or an interpreter loads (or dies: its
		// supervisor ends, which the next round sees).
		loaded := make(chan struct{})
		for _, l := range loading {
			go func() {
				select {
				case <-l:
				case <-changed:
				}
				select {
				case loaded <- struct{}{}:
				default:
				}
			}()
		}
		select {
		case <-changed:
		case <-loaded:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
