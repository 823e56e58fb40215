package packages

import (
	"context"
	"sync"

	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Sessions returns next, a session backend, with packages: a session
// created with packages (session_create's packages argument) gets them
// installed (or from the cache) before it starts, and every call of the
// session sees them read-only, as a run does. The cache entry stays in use,
// and so is never evicted, until the session closes. A session cannot
// install more packages once it runs: create a session with the whole list.
func (r *Runner) Sessions(next sessions.Backend) sessions.Backend {
	return sessionBackend{r: r, next: next}
}

type sessionBackend struct {
	r    *Runner
	next sessions.Backend
}

func (b sessionBackend) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	if len(spec.Packages) == 0 {
		return b.next.Start(ctx, spec)
	}
	dir, release, _, err := b.r.Prepare(ctx, spec.Language, spec.Packages)
	if err != nil {
		return nil, err
	}
	spec.PackageDir = packageDir(dir)
	s, err := b.next.Start(ctx, spec)
	if err != nil {
		release()
		return nil, err
	}
	return &session{Session: s, release: release}, nil
}

// session releases its cache entry when it closes.
type session struct {
	sessions.Session
	release func()
	once    sync.Once
}

func (s *session) Close() error {
	err := s.Session.Close()
	s.once.Do(s.release)
	return err
}
