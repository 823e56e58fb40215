package principals

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/codeexec/codeexec/sandbox"
)

// ErrRefused is wrapped by the errors of requests that a principal's policy
// refuses (*RefusedError) or that are over its concurrency or rate
// (*LimitedError).
var ErrRefused = errors.New("refused by the principal's policy")

// RefusedError is a request its principal's policy does not allow. Its
// message is one sentence that names the principal, what was refused and
// the field of the principals file that says so.
type RefusedError struct {
	Principal string
	// Field is the principal's field (its key in the file) that refuses.
	Field string
	Msg   string
}

func (e *RefusedError) Error() string { return e.Msg }

// Unwrap lets errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// LimitedError is a request over its principal's concurrency
// (max_concurrent) or rate (runs_per_minute): it did not run, and may be
// sent again after RetryAfter (for concurrency: once one of the
// principal's requests in flight has ended, which nothing tells in
// advance; RetryAfter is then 0).
type LimitedError struct {
	Principal string
	// Field is max_concurrent or runs_per_minute.
	Field string
	// Max is the principal's limit.
	Max int
	// RetryAfter is how long until the rate lets a run start again.
	RetryAfter time.Duration
}

func (e *LimitedError) Error() string {
	if e.Field == "max_concurrent" {
		s := "s"
		if e.Max == 1 {
			s = ""
		}
		return fmt.Sprintf("Principal %s already has %d request%s running or waiting, its most (max_concurrent: %d), so this one did not run: retry once one of them has ended.", e.Principal, e.Max, s, e.Max)
	}
	return fmt.Sprintf("Principal %s is over its rate of %d runs a minute (runs_per_minute: %d), so this one did not run: retry in %s.", e.Principal, e.Max, e.Max, roundUp(e.RetryAfter))
}

// Unwrap lets errors.Is(err, ErrRefused) hold.
func (e *LimitedError) Unwrap() error { return ErrRefused }

// roundUp writes d to the tenth of a second above it (never "0s").
func roundUp(d time.Duration) string {
	tenths := math.Ceil(d.Seconds() * 10)
	return fmt.Sprintf("%g s", max(tenths, 1)/10)
}

// Guard is the layer of the runner chain that holds each request to its
// principal's policy (the Principal in its context, see From): a request
// the policy does not allow returns a *RefusedError before anything is
// asked or run; every request it lets through goes on narrowed to what
// the principal may reach (sandbox.Request.Network) and without artifacts
// when its files are not rw; and a run over the principal's
// max_concurrent or runs_per_minute returns a *LimitedError at once,
// without waiting, so that another principal is never slowed by it. A
// request whose context carries no principal is refused: the server puts
// one in every request's.
//
// Place it first in the chain after the metrics: what it refuses is never
// shown to a person for approval, recorded as a request, or given a run
// slot.
type Guard struct {
	next sandbox.Runner
	now  func() time.Time

	mu    sync.Mutex
	usage map[string]*usage
}

// usage is one principal's requests in flight and its rate limiter, kept
// by name across reloads.
type usage struct {
	inFlight int
	limiter  *rate.Limiter
	perMin   int
}

var _ sandbox.Runner = (*Guard)(nil)

// NewGuard wraps next. Closing the Guard closes next.
func NewGuard(next sandbox.Runner) *Guard {
	return &Guard{next: next, now: time.Now, usage: map[string]*usage{}}
}

// Run checks req against its principal's policy, admits it under the
// principal's limits, and runs it on the next Runner.
func (g *Guard) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	p := From(ctx)
	if p == nil {
		return nil, &RefusedError{Msg: "The request names no principal, so it did not run; this is a server-side problem, so tell the operator."}
	}
	if err := p.Check(req); err != nil {
		return nil, err
	}
	req = p.Narrow(req)
	if req.RunsCode() {
		release, err := g.admit(p)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	return g.next.Run(ctx, req)
}

// admit counts a run of p against its limits, or returns the
// *LimitedError that refuses it. The concurrency is checked first, so
// that a run refused for it uses none of the rate.
func (g *Guard) admit(p *Principal) (release func(), err error) {
	pol := p.Policy
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.usage[p.Name]
	if u == nil {
		u = &usage{}
		g.usage[p.Name] = u
	}
	if pol.MaxConcurrent > 0 && u.inFlight >= pol.MaxConcurrent {
		return nil, &LimitedError{Principal: p.Name, Field: "max_concurrent", Max: pol.MaxConcurrent}
	}
	if pol.RunsPerMinute > 0 {
		now := g.now()
		u.setRate(now, pol.RunsPerMinute)
		r := u.limiter.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return nil, &LimitedError{Principal: p.Name, Field: "runs_per_minute", Max: pol.RunsPerMinute, RetryAfter: d}
		}
	}
	u.inFlight++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		u.inFlight--
	}, nil
}

// setRate makes u's limiter let perMin runs start a minute, from now on:
// a new limiter starts full; a changed rate (a reload) keeps what was used.
func (u *usage) setRate(now time.Time, perMin int) {
	switch {
	case u.limiter == nil:
		u.limiter = rate.NewLimiter(perMinute(perMin), perMin)
	case u.perMin != perMin:
		u.limiter.SetLimitAt(now, perMinute(perMin))
		u.limiter.SetBurstAt(now, perMin)
	}
	u.perMin = perMin
}

// Reloaded applies the rates of principals just put in force (see
// FileConfig.OnReload) from now, rather than from each one's next run.
func (g *Guard) Reloaded(list []*Principal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	for _, p := range list {
		if u := g.usage[p.Name]; u != nil && u.limiter != nil && p.Policy.RunsPerMinute > 0 {
			u.setRate(now, p.Policy.RunsPerMinute)
		}
	}
}

// perMinute is a rate of n events a minute.
func perMinute(n int) rate.Limit { return rate.Limit(float64(n) / 60) }

// InFlight returns how many requests of the principal named name are in
// flight.
func (g *Guard) InFlight(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u := g.usage[name]; u != nil {
		return u.inFlight
	}
	return 0
}

// Capabilities are the next Runner's.
func (g *Guard) Capabilities() sandbox.Capabilities { return g.next.Capabilities() }

// Close closes the next Runner.
func (g *Guard) Close() error { return g.next.Close() }

// Check returns the *RefusedError of a request that p's policy does not
// allow, or nil: a language it may not use, a timeout above its
// max_timeout, limits above its memory or CPUs, files when its files are
// none, packages it may not install, a session when it may hold none.
func (p *Principal) Check(req sandbox.Request) error {
	pol := p.Policy
	refuse := func(field, format string, a ...any) error {
		return &RefusedError{Principal: p.Name, Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	switch {
	case !slices.Contains(pol.Languages, req.Language):
		return refuse("languages", "Principal %s may not run %s code (its languages: %s), so the request was refused: use %s.",
			p.Name, req.Language, strings.Join(pol.Languages, ", "), orList(pol.Languages))
	case req.RunsCode() && pol.Own("max_timeout") && req.Limits.Timeout > pol.MaxTimeout:
		return refuse("max_timeout", "A timeout of %g seconds is above principal %s's cap of %g seconds (its max_timeout), so the request was refused: ask for at most %g.",
			req.Limits.Timeout.Seconds(), p.Name, pol.MaxTimeout.Seconds(), pol.MaxTimeout.Seconds())
	case req.Limits.MemoryBytes > pol.Memory, req.Limits.CPUs > pol.CPUs:
		return refuse("memory", "The request's limits are above principal %s's memory or CPUs, so it was refused; this is a server-side problem, so tell the operator.", p.Name)
	case len(req.Files) > 0 && pol.Files == FilesNone:
		return refuse("files", "Principal %s may not send files (its files: none), so the request was refused: put the data in the code or in stdin instead.", p.Name)
	case len(req.Packages) > 0 && req.Session == "" && !pol.Packages:
		return refuse("packages", "Principal %s may not install packages (its packages: false), so the request was refused: use what the sandbox has installed.", p.Name)
	case (req.NewSession != nil || req.Session != "") && pol.MaxSessions == 0:
		return refuse("max_sessions", "Principal %s may not use sessions (its max_sessions: 0), so the request was refused: run without a session.", p.Name)
	}
	return nil
}

// Narrow returns req as p's policy lets it run: its network narrowed to
// what p may reach, without artifacts when p's files are not rw, and a
// session it creates counted against p's max_sessions.
func (p *Principal) Narrow(req sandbox.Request) sandbox.Request {
	if p.Policy.Network != nil {
		req.Network = p.Policy.Network
	}
	if p.Policy.Files != FilesWrite {
		req.Artifacts = nil
	}
	if req.NewSession != nil {
		ns := *req.NewSession
		ns.Quota = p.SessionQuota()
		req.NewSession = &ns
	}
	return req
}

// orList writes names as "a, b or c".
func orList(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
