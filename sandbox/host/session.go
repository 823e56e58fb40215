package host

import (
	"context"
	"fmt"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
	"github.com/codeexec/codeexec/sandbox/internal/sessionproc"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Sessions returns the session backend of mode none: a directory in the
// work root and one run of the session supervisor (sandbox/sessions) that
// lives as long as the session, run directly like a run of mode none (no
// isolation: its directory is capped per nothing, its processes are the
// server's user's).
func (r *Runner) Sessions() sessions.Backend { return sessionBackend{r} }

type sessionBackend struct{ r *Runner }

var _ sessions.Backend = sessionBackend{}

func (b sessionBackend) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	r := b.r
	lang, in, err := sandbox.Lookup(spec.Language, r.interp, r.caps.Languages)
	if err != nil {
		return nil, err
	}
	s, err := sessionproc.Start(ctx, sessionproc.Host{
		Mode:   sandbox.ModeNone,
		Root:   r.root,
		Begin:  r.runs.Begin,
		Egress: r.egress,
		Python: sessionproc.Python(r.interp, ""),
		Spec: func(p executor.Program, _ string) (executor.Spec, func(), error) {
			// As a run: mode none applies the timeout and the output cap only.
			p.Limits = sandbox.Limits{Timeout: p.Limits.Timeout, OutputBytes: p.Limits.OutputBytes}
			spec, err := r.programSpec(p)
			return spec, func() {}, err
		},
		Owner: func() (int, int, bool) { return 0, 0, false },
		Log:   r.log,
	}, spec, lang, in)
	if err != nil {
		return nil, fmt.Errorf("none: %w", err)
	}
	return s, nil
}
