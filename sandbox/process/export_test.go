package process

import (
	"context"
	"errors"
)

// PreparedTaken is how many requests a prepared run served.
func PreparedTaken(r *Runner) int64 {
	if r.pool == nil {
		return 0
	}
	return r.pool.taken.Load()
}

// WaitPrepared waits until a prepared run waits in the pool, and returns
// its supervisor's pid. It fails when the pool is idle with nothing
// prepared (preparing failed), or when ctx ends.
func WaitPrepared(ctx context.Context, r *Runner) (int, error) {
	if r.pool == nil {
		return 0, errors.New("the runner has no pool")
	}
	for {
		r.pool.mu.Lock()
		idle, filling, changed := r.pool.idle, r.pool.filling, r.pool.changed
		pid := 0
		if len(idle) > 0 {
			pid = idle[0].prep.PID()
		}
		r.pool.mu.Unlock()
		switch {
		case pid != 0:
			return pid, nil
		case filling == 0:
			return 0, errors.New("nothing is prepared and nothing is being prepared")
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
