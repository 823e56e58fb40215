package sandbox

import (
	"context"
	"fmt"
)

// Limited is a Runner that lets at most n runs of the wrapped Runner happen
// at once. Further requests wait their turn in arrival order of the Go
// scheduler; a request whose ctx ends while it waits gives up without running.
type Limited struct {
	next Runner
	sem  chan struct{}
}

var _ Runner = (*Limited)(nil)

// Limit wraps next so that at most n runs happen at once (n < 1 is treated as 1).
// Closing the Limited closes next.
func Limit(next Runner, n int) *Limited {
	if n < 1 {
		n = 1
	}
	return &Limited{next: next, sem: make(chan struct{}, n)}
}

// Run waits for a free slot, then runs req on the wrapped Runner.
func (l *Limited) Run(ctx context.Context, req Request) (*Result, error) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a free run slot: %w", ctx.Err())
	}
	defer func() { <-l.sem }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return l.next.Run(ctx, req)
}

// InFlight returns how many runs hold a slot now.
func (l *Limited) InFlight() int { return len(l.sem) }

// Capabilities returns the wrapped Runner's capabilities.
func (l *Limited) Capabilities() Capabilities { return l.next.Capabilities() }

// Close closes the wrapped Runner.
func (l *Limited) Close() error { return l.next.Close() }

// Share returns a Runner that runs on next but takes its slots from l, so
// that runs on next (a session's, say) count against the same limit. Its
// Close does nothing.
func (l *Limited) Share(next Runner) Runner { return &shared{Limited{next: next, sem: l.sem}} }

type shared struct{ Limited }

func (*shared) Close() error { return nil }
