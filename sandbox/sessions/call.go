package sessions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// requestTimeout bounds how long the supervisor may take to write a call's
// files or to send what a call changed.
const requestTimeout = time.Minute

// CallHooks are what a mode adds to a call of a session (see Call).
type CallHooks struct {
	// Mode is reported in the Result.
	Mode sandbox.Mode
	// Reset kills every process of the session but its supervisor and
	// waits for a fresh interpreter, after a call that timed out, went
	// past the output cap or was cancelled. An error leaves the sandbox
	// broken (unless Reconnect mends it).
	Reset func() error
	// Reconnect, if set, is for a mode whose calls each reach the
	// supervisor over a channel of their own, which can end while the
	// supervisor lives on (kubernetes mode: an exec into the pod, whose
	// client the call's code can kill, or whose stream the cluster can
	// cut). When the call's channel ended before the call did, or Reset
	// failed on it, Reconnect returns a new channel on which the session
	// was reset (every process of it but the supervisor killed, a fresh
	// interpreter waiting): the call is reported as killed with its state
	// lost, and Call goes on with the new channel. An error means the
	// session's sandbox is gone.
	Reconnect func() (*Conn, error)
	// OOM, if set, says whether the memory limit ended the call, from the
	// supervisor's count of OOM kills (-1: it could not tell).
	OOM func(res *sandbox.Result, ooms int)
	// Network, if set, puts what the call reached in its Result.
	Network func(res *sandbox.Result)
	// Known is what the previous call's artifacts were found with; Call
	// updates it.
	Known *artifacts.Snapshot
}

// Call runs one call of a session on its supervisor: the request's files
// are written into the working directory, the code runs within the
// request's limits, and with req.Artifacts the files that the call created
// or changed come back (what earlier calls made is not reported again). A
// call that timed out, went past the output cap or was cancelled is reset:
// its state is lost, its files stay. Errors: a file refused (wrapping
// artifacts.ErrInvalidFile), ctx's error for a cancelled call (with its
// Result), sandbox.ErrSandboxUnavailable when the supervisor failed (the
// session's sandbox is then gone).
func Call(ctx context.Context, conn *Conn, req sandbox.Request, h CallHooks) (*sandbox.Result, error) {
	fctx, cancel := context.WithTimeout(ctx, requestTimeout)
	err := conn.WriteFiles(fctx, req.Files)
	cancel()
	switch {
	case errors.Is(err, artifacts.ErrInvalidFile):
		return nil, err
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("writing the call's files: %w", ctx.Err())
	case err != nil:
		return nil, fmt.Errorf("%w: writing the call's files into the session's sandbox: %v", sandbox.ErrSandboxUnavailable, err)
	}
	res, outcome, ooms := conn.Exec(ctx, req.Code, req.Stdin, req.Limits)
	res.Sandbox = h.Mode
	if outcome != Completed {
		// The call must end now: every process of it goes.
		res.StateLost = true
		res.ExitCode, res.Signal = 137, "killed"
		var rerr error
		if outcome != Died {
			rerr = h.Reset()
		}
		if (outcome == Died || rerr != nil) && h.Reconnect != nil {
			var nc *Conn
			if nc, rerr = h.Reconnect(); rerr == nil {
				conn = nc
			}
		}
		switch {
		case outcome == Died && (h.Reconnect == nil || rerr != nil):
			return nil, fmt.Errorf("%w: the session's supervisor ended during the call (%v): its variables and files are gone; close the session and create another", sandbox.ErrSandboxUnavailable, errors.Join(conn.Err(), rerr))
		case rerr != nil:
			return nil, fmt.Errorf("%w: the session could not be reset after the call: %v", sandbox.ErrSandboxUnavailable, rerr)
		case outcome == Cancelled:
			err = fmt.Errorf("call cancelled: %w", ctx.Err())
		}
	}
	if h.OOM != nil {
		h.OOM(res, ooms)
	}
	if res.OOMKilled {
		res.Signal = "killed"
	}
	if h.Network != nil {
		h.Network(res)
	}
	if err == nil && req.Artifacts != nil {
		res.Artifacts, *h.Known = conn.collectChanges(h.Known.Add(artifacts.SnapshotOf(req.Files)), *req.Artifacts)
	}
	return res, err
}

// collectChanges returns the files of the working directory that changed
// since the last time, compared with before, and what to compare the next
// call's with. A failure is reported in the Collection (Incomplete): the
// call itself happened.
func (c *Conn) collectChanges(before artifacts.Snapshot, opts artifacts.Options) (*artifacts.Collection, artifacts.Snapshot) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	var col *artifacts.Collection
	var next artifacts.Snapshot
	err := c.Changes(ctx, func(r io.Reader) error {
		var err error
		col, next, err = artifacts.CollectNext(artifacts.TarSource{R: r}, before, opts)
		return err
	})
	if err != nil {
		if col == nil {
			col = &artifacts.Collection{}
		}
		col.Incomplete = "the working directory could not be read to the end (" + err.Error() + ")"
		next = artifacts.Snapshot{}
	}
	return col, next
}
