package httpserve

import (
	"context"
	"sync"
)

// InFlight counts work in flight (requests, runs) for a drain to wait on.
// The zero value is ready; it is safe for concurrent use.
type InFlight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0, then replaced
}

// Begin counts one more; call the function it returns once, when it ends.
func (f *InFlight) Begin() (end func()) {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.n--; f.n == 0 && f.idle != nil {
				close(f.idle)
				f.idle = nil
			}
		})
	}
}

// Wait waits until nothing is in flight or ctx ends, and returns how many
// are left (0 when it returned because nothing was).
func (f *InFlight) Wait(ctx context.Context) int {
	for {
		f.mu.Lock()
		if f.n == 0 {
			f.mu.Unlock()
			return 0
		}
		if f.idle == nil {
			f.idle = make(chan struct{})
		}
		idle := f.idle
		f.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.n
		}
	}
}
