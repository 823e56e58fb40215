package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/server/httpserve"
)

// inFlight is the runner chain, counting the runs in it (those that wait
// for a slot or an approval included), for the drain at shutdown.
type inFlight struct {
	sandbox.Runner
	runs httpserve.InFlight
}

// Run runs req through the chain, counted.
func (f *inFlight) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	defer f.runs.Begin()()
	return f.Runner.Run(ctx, req)
}

// drainer is what the drain stops taking work on (server.Server): Drain
// refuses new work, WaitRequests waits for the requests in flight.
type drainer interface {
	Drain()
	WaitRequests(ctx context.Context) int
}

// drainThenStop waits for signal to end, then makes srv refuse new work,
// lets the runs and requests in flight finish for at most timeout, and
// calls stop. It returns when life ends without a signal.
func drainThenStop(signal, life context.Context, srv drainer, runs *inFlight, timeout time.Duration, stop func(), log *slog.Logger) {
	select {
	case <-life.Done():
		return
	case <-signal.Done():
	}
	defer stop()
	if timeout <= 0 {
		return
	}
	srv.Drain()
	log.Info("draining: new sessions and runs are refused; waiting for the runs in flight", "drain_timeout", timeout)
	ctx, cancel := context.WithTimeout(life, timeout)
	defer cancel()
	// The runs first (tasks run after their request ended), then the
	// requests that carry their results back.
	if left := runs.runs.Wait(ctx); left > 0 {
		log.Warn("drain timeout: stopping the runs still in flight", "runs", left)
		return
	}
	if left := srv.WaitRequests(ctx); left > 0 {
		log.Warn("drain timeout: closing the requests still in flight", "requests", left)
		return
	}
	log.Info("drained: no run or request in flight")
}
