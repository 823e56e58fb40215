package sessions

import (
	"context"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// Router is the session router of the runner chain. A request that names a
// Session runs in that session of its caller (sandbox.CallerFrom's Client),
// through the Manager, which answers ErrUnknownSession for a session that
// is not the caller's exactly as for one that does not exist; a request
// with NewSession creates a session for its caller and names it in
// Result.Session; every other request goes to the next Runner.
type Router struct {
	m    *Manager
	next sandbox.Runner
}

var _ sandbox.Runner = (*Router)(nil)

// Route returns the session router of m in front of next. Closing the
// Router closes next, not m (see Manager.Shutdown).
func Route(m *Manager, next sandbox.Runner) *Router { return &Router{m: m, next: next} }

// Run runs req in its session, creates the session it asks for, or runs it
// on the next Runner.
func (r *Router) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	owner := sandbox.CallerFrom(ctx).Client
	switch {
	case req.NewSession != nil:
		start := time.Now()
		info, err := r.m.Create(ctx, owner, CreateOptions{Language: req.Language, Limits: req.Limits, IdleTimeout: req.NewSession.IdleTimeout,
			Packages: req.Packages, Network: req.Network, Quota: req.NewSession.Quota})
		if err != nil {
			return nil, err
		}
		return &sandbox.Result{Sandbox: r.next.Capabilities().Mode, Duration: time.Since(start), Session: info.ID}, nil
	case req.Session != "":
		return r.m.Exec(ctx, owner, req.Session, req)
	}
	return r.next.Run(ctx, req)
}

// Capabilities are the next Runner's.
func (r *Router) Capabilities() sandbox.Capabilities { return r.next.Capabilities() }

// Close closes the next Runner.
func (r *Router) Close() error { return r.next.Close() }
