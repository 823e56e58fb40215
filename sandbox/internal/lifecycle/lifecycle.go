// Package lifecycle is what the runners of docker and kubernetes mode do
// alike around their runs: sweep leftovers on a period until they close,
// and, when they close, let the runs in flight end (within a bound), close
// the warm pool and wait for every removal still in flight.
package lifecycle

import (
	"log/slog"
	"sync"
	"time"
)

// Every calls sweep with the time of each tick, every period, until done
// closes. It returns once done is closed and no sweep is running.
func Every(done <-chan struct{}, period time.Duration, sweep func(now time.Time)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			sweep(now)
		}
	}
}

// Drain is the first part of a runner's Close, once it refuses new runs
// and has told the runs in flight to stop: it waits for those runs for at
// most bound (and logs when they did not all end), closes the warm pool
// (which releases its items and stops refilling), and waits until every
// release or removal in flight (removals) has finished. The runner then
// removes what it still tracks.
func Drain(log *slog.Logger, runs *sync.WaitGroup, bound time.Duration, pool interface{ Close() }, removals *sync.WaitGroup) {
	waited := make(chan struct{})
	go func() { runs.Wait(); close(waited) }()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-waited:
	case <-t.C:
		log.Warn("runs did not finish in time while closing")
	}
	pool.Close()
	removals.Wait()
}
