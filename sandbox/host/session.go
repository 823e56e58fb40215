package host

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
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
		Spec: func(lang, dir, _, path string, args []string, lim sandbox.Limits, serve func(net.Listener)) (executor.Spec, func(), error) {
			marker := RunIDVariable + "=" + filepath.Base(dir)
			env := append(os.Environ(), marker)
			if spec.PackageDir != nil {
				env = append(env, sandbox.PackageEnv(lang, spec.PackageDir.HostDir)...)
			}
			if serve != nil {
				// As a run: the program is pointed at a listener of its own
				// (not enforced in mode none; see EgressWarning).
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return executor.Spec{}, nil, fmt.Errorf("%w: egress listener: %v", sandbox.ErrSandboxUnavailable, err)
				}
				serve(l)
				env = append(withoutProxyEnv(env), egress.ProxyEnv(l.Addr().String())...)
			}
			// And as a run: WORKSPACE, and python's figure hook.
			if r.workspace != nil {
				env = append(env, sandbox.WorkspaceVariable+"="+r.workspace.Dir)
			}
			if lang == "python" && r.python != nil {
				path, env = r.python.Python, executor.PythonEnv(env, r.python)
			}
			return executor.Spec{
				Path:      path,
				Args:      args,
				Env:       env,
				Dir:       dir,
				Limits:    sandbox.Limits{Timeout: lim.Timeout, OutputBytes: lim.OutputBytes},
				Direct:    true,
				RunMarker: marker,
			}, func() {}, nil
		},
		Owner: func() (int, int, bool) { return 0, 0, false },
		Log:   r.log,
	}, spec, lang, in)
	if err != nil {
		return nil, fmt.Errorf("none: %w", err)
	}
	return s, nil
}
