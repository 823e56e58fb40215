package lifecycle

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestEverySweepsUntilDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		done := make(chan struct{})
		var ticks []time.Duration
		returned := make(chan struct{})
		go func() {
			Every(done, time.Minute, func(now time.Time) { ticks = append(ticks, now.Sub(start)) })
			close(returned)
		}()
		time.Sleep(3*time.Minute + time.Second)
		close(done)
		<-returned
		if len(ticks) != 3 || ticks[0] != time.Minute || ticks[2] != 3*time.Minute {
			t.Fatalf("sweeps at %v, want at 1m, 2m and 3m", ticks)
		}
	})
}

// pool records when it was closed.
type pool struct{ closedAt *time.Time }

func (p pool) Close() { *p.closedAt = time.Now() }

func TestDrainWaitsForRunsThenClosesThePoolThenWaitsForRemovals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var runs, removals sync.WaitGroup
		var closedAt, removedAt time.Time
		runs.Add(1)
		go func() { time.Sleep(time.Second); runs.Done() }()
		removals.Add(1)
		go func() {
			time.Sleep(2 * time.Second)
			removedAt = time.Now()
			removals.Done()
		}()
		var logs bytes.Buffer
		Drain(slog.New(slog.NewTextHandler(&logs, nil)), &runs, time.Minute, pool{&closedAt}, &removals)
		if closedAt.Sub(start) != time.Second || removedAt.Sub(start) != 2*time.Second || time.Since(start) != 2*time.Second || logs.Len() != 0 {
			t.Fatalf("pool closed after %v, removals done after %v, Drain returned after %v, logs %q; want 1s, 2s, 2s, none",
				closedAt.Sub(start), removedAt.Sub(start), time.Since(start), logs.String())
		}
	})
}

func TestDrainBoundsTheWaitForRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var runs, removals sync.WaitGroup
		runs.Add(1) // a run that never ends
		var closedAt time.Time
		var logs bytes.Buffer
		Drain(slog.New(slog.NewTextHandler(&logs, nil)), &runs, time.Minute, pool{&closedAt}, &removals)
		if closedAt.Sub(start) != time.Minute || !strings.Contains(logs.String(), "runs did not finish in time while closing") {
			t.Fatalf("pool closed after %v, logs %q; want after the bound of 1m, with a warning", closedAt.Sub(start), logs.String())
		}
		runs.Done() // lets the waiting goroutine end inside the bubble
	})
}
