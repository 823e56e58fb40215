package process

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
	"github.com/codeexec/codeexec/sandbox/internal/sessionproc"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Sessions returns the session backend of this Runner: each session is one
// long run of the session supervisor (sandbox/sessions), isolated and
// limited exactly as a run is (namespaces, Landlock, the seccomp filter,
// rlimits, the run's supervisor that kills every process it started), whose
// working directory is, with a mount namespace, the run's own tmpfs capped
// like a run's (CODE_EXEC_FILE_SIZE, 16384 files). A session holds a run's
// guard for its whole life: its own host user from the uid range (when the
// server is root) and its own cgroups, which bound the interpreter and the
// session's bash calls together. The sessions end when the Runner closes; a
// server that dies takes them along (the run's supervisor sees its control
// pipe close), and the next start sweeps their folders with the work root.
func (r *Runner) Sessions() sessions.Backend { return sessionBackend{r} }

type sessionBackend struct{ r *Runner }

var _ sessions.Backend = sessionBackend{}

func (b sessionBackend) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	r := b.r
	lang, in, err := sandbox.Lookup(spec.Language, r.interp, r.caps.Languages)
	if err != nil {
		return nil, err
	}
	g, err := r.guard(ctx, spec.Limits)
	if err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	sg := &sessionGuard{r: r, g: g}
	s, err := sessionproc.Start(ctx, sessionproc.Host{
		Mode:    sandbox.ModeProcess,
		Root:    r.root,
		Begin:   r.runs.Begin,
		Spec:    sg.spec,
		Python:  sessionproc.Python(r.interp, executor.MinimalPath),
		Egress:  r.egress,
		Owner:   g.owner,
		Finish:  sg.finish,
		Release: sg.release,
		Log:     r.log,
	}, spec, lang, in)
	if err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	return s, nil
}

// sessionGuard is the run guard a session holds.
type sessionGuard struct {
	r    *Runner
	g    *runGuard
	ooms int
	once sync.Once
}

// spec is the Spec of a session's supervisor: a run's (programSpec), as
// the session's user and in its cgroups, whose working directory p.Dir lives
// as long as the supervisor (the run's capped tmpfs, with a mount
// namespace), with the folder ctl of its control channel bound in.
func (sg *sessionGuard) spec(p executor.Program, ctl string) (executor.Spec, func(), error) {
	r, g := sg.r, sg.g
	iso := g.iso
	cleanup := func() {}
	if iso.Mount {
		root, err := r.makeRootDir(iso)
		if err != nil {
			return executor.Spec{}, nil, err
		}
		iso.RootDir = root
		cleanup = func() { _ = executor.RemoveAll(root) }
	}
	iso.Binds = append(slices.Clip(iso.Binds), executor.Bind{Src: ctl, Dst: ctl, Writable: true})
	spec, err := r.programSpec(g, iso, p)
	if err != nil {
		cleanup()
		return executor.Spec{}, nil, err
	}
	return spec, cleanup, nil
}

// finish reports an OOM kill in the session's cgroup since the last call.
// Calls of a session do not overlap.
func (sg *sessionGuard) finish(res *sandbox.Result) {
	if sg.g.cg == nil || res == nil {
		return
	}
	n := sg.g.cg.oomKills()
	if n > sg.ooms && res.ExitCode != 0 {
		res.OOMKilled = true
	}
	sg.ooms = n
}

// release kills whatever of the session is left (in its cgroup, and among
// the processes of its user) and gives the user back.
func (sg *sessionGuard) release() { sg.once.Do(func() { sg.g.end(false) }) }
