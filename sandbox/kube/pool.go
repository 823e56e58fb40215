package kube

import (
	"context"
	"errors"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// The warm pool (sandbox/internal/warmpool, which docker mode uses
// too): for each enabled language, Config.PoolSize pods created, running
// and attached, their supervisor holding its nonce and their interpreter
// loaded and blocked reading its program. A run takes one without any API
// call, writes its program and reads the answer; the pod is then deleted
// in the background and the pool makes a new one. A pod serves exactly one
// run.
//
// Warm pods carry the role "pool", a deadline (and activeDeadlineSeconds)
// of poolLease from their creation, and are replaced after poolMaxIdle; one
// is used only when the run's timeout ends before its deadline. A warm pod
// that ends or is deleted from outside while it waits is replaced. A crashed
// server's warm pods end by themselves (StdinOnce: the end of its attach
// stream closes their stdin) and are swept.
const (
	poolLease        = 15 * time.Minute
	poolMaxIdle      = 5 * time.Minute
	refillMaxBackoff = 10 * time.Second
	// refillParallel bounds the pods being made for the pool at once: the
	// work is the API server's and the kubelet's, not this process's.
	refillParallel = 2
)

// poolMaker makes the pool's pods.
type poolMaker struct{ r *Runner }

// Make starts a warm pod of lang and returns once its interpreter is ready.
func (m poolMaker) Make(ctx context.Context, lang string, lim sandbox.Limits) (*podSession, error) {
	s, err := m.r.start(ctx, m.r.runSpec(lang, lim, rolePool, time.Now().Add(poolLease)))
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(podStartTimeout)
	defer t.Stop()
	select {
	case <-s.out.Ready:
		return s, nil
	case <-s.Broken():
		err = errors.New("the pod ended before its interpreter was ready")
	case <-t.C:
		err = errors.New("the interpreter was not ready in time")
	case <-ctx.Done():
		err = ctx.Err()
	}
	m.r.release(s)
	return nil, err
}

// Release deletes a pod in the background.
func (m poolMaker) Release(s *podSession) { m.r.release(s) }

// PoolStats is what the warm pool reports (for metrics).
type PoolStats struct {
	// Ready counts the warm pods waiting, by language.
	Ready map[string]int
	// Hits and Misses count runs that took a warm pod and runs that found
	// none, since start.
	Hits, Misses int64
}

// PoolStats reports the warm pool: cheap, and safe for concurrent use.
// Without a pool (PoolSize 0) every count is zero.
func (r *Runner) PoolStats() PoolStats {
	st := r.pool.Stats()
	return PoolStats{Ready: st.Ready, Hits: st.Hits, Misses: st.Misses}
}
