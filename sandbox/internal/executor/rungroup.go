package executor

import (
	"context"
	"sync"

	"github.com/codeexec/codeexec/sandbox"
)

// RunGroup tracks the runs of a Runner, so that closing the Runner stops
// the runs in flight and waits for their cleanup. The zero value is not
// ready: use NewRunGroup.
type RunGroup struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	base   context.Context
	cancel context.CancelFunc
}

// NewRunGroup returns an open RunGroup.
func NewRunGroup() *RunGroup {
	g := &RunGroup{}
	g.base, g.cancel = context.WithCancel(context.Background())
	return g
}

// Begin registers a run. Its context is cancelled when ctx is or when the
// group closes; the caller must call end when the run is cleaned up. After
// Close, Begin fails with sandbox.ErrClosed.
func (g *RunGroup) Begin(ctx context.Context) (context.Context, func(), error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, nil, sandbox.ErrClosed
	}
	g.wg.Add(1)
	g.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.base, cancel)
	return ctx, func() {
		stop()
		cancel()
		g.wg.Done()
	}, nil
}

// Go runs f in the background as part of a run in flight (its cleanup
// after its result, say): Close waits for it too. Only a run that has
// begun and not ended may call it.
func (g *RunGroup) Go(f func()) {
	g.wg.Go(f)
}

// Close cancels the runs in flight and waits for them to end. It reports
// whether this call closed the group (false when it was already closed).
func (g *RunGroup) Close() bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
	return true
}
