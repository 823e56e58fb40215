package docker

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/warmpool"
)

// The warm pool (sandbox/internal/warmpool, which kubernetes mode uses too).
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
// The pool never makes a run wait (a run that finds none ready creates its
// own: waiting for the one being created, measured back to back, cut the
// slow tail but cost a third of the rate), refills in the background with
// at most refillParallel containers being created at once (when most runs
// find none ready, Capabilities says so in sandbox_info), and replaces a warm
// container that stops, or whose stream ends, before it is used (engine
// restart, docker rm -f); while the engine does not answer, refills back
// off (warmpool's rules). A run whose warm container breaks before it took
// the program runs cold instead, so a pool fault never reaches the caller.
//
// Warm containers carry the role "pool" and a deadline of poolLease from
// their creation; the pool replaces them after poolMaxIdle, and uses one
// only when the run's timeout ends before the deadline. Another codeexec
// therefore never takes a live warm container for a leftover, while a
// crashed server's warm containers stop by themselves (StdinOnce: the end
// of its attach stream closes their stdin) and are removed by the next
// codeexec that starts or reaps. Close removes them all.
const (
	poolLease        = 30 * time.Minute
	poolMaxIdle      = 10 * time.Minute
	poolReadyTimeout = engineTimeout
	refillMaxBackoff = 10 * time.Second
)

// refillParallel bounds the containers being created for the pool at once:
// creating one keeps the engine busy on about one CPU.
var refillParallel = max(1, runtime.NumCPU()/2)

// newPool starts the warm pool of r (none when size is 0).
func newPool(r *Runner, size int, lim sandbox.Limits) *warmpool.Pool[*session] {
	return warmpool.New[*session](poolMaker{r}, warmpool.Options{
		Size: size, Languages: warmpool.Languages(r.interps, r.cfg.Languages), Limits: lim,
		Parallel: refillParallel, MaxIdle: poolMaxIdle, Grace: leftoverGrace, MaxBackoff: refillMaxBackoff,
		Logger: r.log, What: "container",
	})
}

// poolMaker makes the pool's containers.
type poolMaker struct{ r *Runner }

// Make starts a warm container of lang and returns once its interpreter is
// ready.
func (m poolMaker) Make(ctx context.Context, lang string, lim sandbox.Limits) (*session, error) {
	s, err := m.r.start(ctx, m.r.runSpec(lang, lim, rolePool, time.Now().Add(poolLease), nil), lang)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(poolReadyTimeout)
	defer t.Stop()
	select {
	case <-s.out.Ready:
		return s, nil
	case <-s.exitedC:
		err = errors.New("the container stopped before its interpreter was ready")
	case <-s.readC:
		err = errors.New("the container's stream ended before its interpreter was ready")
	case <-t.C:
		err = errors.New("the interpreter was not ready in time")
	case <-ctx.Done():
		err = errors.New("closed")
	}
	m.r.release(s)
	return nil, err
}

// Release removes a container in the background.
func (m poolMaker) Release(s *session) { m.r.release(s) }

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
	if r.pool == nil {
		return PoolStats{Ready: map[string]int{}}
	}
	st := r.pool.Stats()
	return PoolStats{Ready: st.Ready, Hits: st.Hits, Misses: st.Misses}
}
