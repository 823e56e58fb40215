package sandbox

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// callerKey carries a run's Caller in its context.
type callerKey struct{}

// Caller says whose a run is, for the fair hand-out of Limited's slots.
type Caller struct {
	// Client is who asked for the run (an MCP client session today, a
	// principal once they exist): waiting runs take free slots in turn,
	// one client after the other, so that one client's queue cannot make
	// another's run wait behind all of it.
	Client string
	// Background marks a run that nobody waits on in a request (the run
	// of an MCP task): such runs hold at most all the slots but one (see
	// Limit), so that a call a client waits on never waits behind them.
	Background bool
}

// WithCaller returns ctx carrying c, which Limited reads. A run without one
// is a foreground run of the client "".
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the Caller that ctx carries (the zero Caller if none).
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// Limited is a Runner that lets at most n runs of the wrapped Runner happen
// at once. Further requests wait their turn: a free slot goes to the
// clients that wait in turn (round robin; each client's runs in arrival
// order), and background runs (see Caller) hold at most n-1 slots when n
// is above 1. A request whose ctx ends while it waits gives up without
// running.
type Limited struct {
	next  Runner
	slots *slots
}

var _ Runner = (*Limited)(nil)

// Limit wraps next so that at most n runs happen at once (n < 1 is treated
// as 1), background ones at most n-1 (all of them when n is 1). Closing the
// Limited closes next.
func Limit(next Runner, n int) *Limited {
	if n < 1 {
		n = 1
	}
	return &Limited{next: next, slots: &slots{n: n, maxBackground: max(n-1, 1), queues: map[string][]*waiter{}, served: map[string]uint64{}, running: map[string]int{}}}
}

// Run waits for a free slot, then runs req on the wrapped Runner. A request
// that runs no code (see Request.RunsCode) takes no slot.
func (l *Limited) Run(ctx context.Context, req Request) (*Result, error) {
	if !req.RunsCode() {
		return l.next.Run(ctx, req)
	}
	release, err := l.slots.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for a free run slot: %w", err)
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return l.next.Run(ctx, req)
}

// InFlight returns how many runs hold a slot now.
func (l *Limited) InFlight() int {
	l.slots.mu.Lock()
	defer l.slots.mu.Unlock()
	return l.slots.inUse
}

// Waiting returns how many runs wait for a slot now.
func (l *Limited) Waiting() int {
	l.slots.mu.Lock()
	defer l.slots.mu.Unlock()
	n := 0
	for _, q := range l.slots.queues {
		n += len(q)
	}
	return n
}

// Capabilities returns the wrapped Runner's capabilities.
func (l *Limited) Capabilities() Capabilities { return l.next.Capabilities() }

// Close closes the wrapped Runner.
func (l *Limited) Close() error { return l.next.Close() }

// slots hands out a Limited's run slots.
type slots struct {
	mu            sync.Mutex
	n             int
	maxBackground int
	inUse         int
	background    int
	// queues holds each client's waiting runs, in arrival order; turns
	// lists the clients that have some, in the order they came.
	queues map[string][]*waiter
	turns  []string
	// served is when each client with runs waiting or holding slots last
	// got a slot (by clock), running how many slots it holds.
	served  map[string]uint64
	running map[string]int
	clock   uint64
}

type waiter struct {
	background bool
	granted    bool
	ready      chan struct{}
}

// acquire waits for a slot for the run of ctx's Caller and returns the
// func that gives it back, or ctx's error.
func (s *slots) acquire(ctx context.Context) (release func(), err error) {
	c := CallerFrom(ctx)
	w := &waiter{background: c.Background, ready: make(chan struct{})}
	s.mu.Lock()
	if len(s.queues[c.Client]) == 0 {
		s.turns = append(s.turns, c.Client)
	}
	s.queues[c.Client] = append(s.queues[c.Client], w)
	s.dispatch()
	s.mu.Unlock()
	release = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.inUse--
		if w.background {
			s.background--
		}
		if s.running[c.Client]--; s.running[c.Client] == 0 {
			delete(s.running, c.Client)
			if len(s.queues[c.Client]) == 0 {
				delete(s.served, c.Client)
			}
		}
		s.dispatch()
	}
	select {
	case <-w.ready:
		return release, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	granted := w.granted
	if !granted {
		s.remove(c.Client, w)
	}
	s.mu.Unlock()
	if granted {
		release()
	}
	return nil, ctx.Err()
}

// remove takes w out of client's queue; call with the lock held.
func (s *slots) remove(client string, w *waiter) {
	q := slices.DeleteFunc(s.queues[client], func(x *waiter) bool { return x == w })
	if len(q) > 0 {
		s.queues[client] = q
		return
	}
	delete(s.queues, client)
	s.turns = slices.DeleteFunc(s.turns, func(c string) bool { return c == client })
	if s.running[client] == 0 {
		delete(s.served, client)
	}
}

// dispatch hands free slots to waiting runs: each goes to the first
// eligible run (a background run only while background runs hold fewer
// than maxBackground slots) of the client that was served least recently,
// the one that came first among equals. Call with the lock held.
func (s *slots) dispatch() {
	for s.inUse < s.n {
		var pick *waiter
		client := ""
		for _, c := range s.turns {
			if pick != nil && s.served[c] >= s.served[client] {
				continue
			}
			for _, w := range s.queues[c] {
				if !w.background || s.background < s.maxBackground {
					pick, client = w, c
					break
				}
			}
		}
		if pick == nil {
			return
		}
		s.inUse++
		if pick.background {
			s.background++
		}
		s.clock++
		s.served[client] = s.clock
		s.running[client]++
		pick.granted = true
		close(pick.ready)
		s.remove(client, pick)
	}
}
