package sessions

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// nextRunner is the Runner after the router: it counts what reaches it.
type nextRunner struct{ runs int }

func (n *nextRunner) Run(_ context.Context, req sandbox.Request) (*sandbox.Result, error) {
	n.runs++
	return &sandbox.Result{Stdout: "next " + req.Code}, nil
}

func (n *nextRunner) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Mode: sandbox.ModeProcess}
}

func (n *nextRunner) Close() error { return nil }

// TestRouter: a request that creates a session creates one for its caller
// and names it; a request in a session runs there, for its owner only, and
// another caller gets exactly the answer of an id that does not exist; a
// request without a session goes on to the next Runner.
func TestRouter(t *testing.T) {
	t.Parallel()
	m := New(Config{Backend: &fakeBackend{}, MaxSessions: 2, IdleTimeout: time.Minute, MaxLifetime: time.Hour})
	t.Cleanup(func() { _ = m.Shutdown() })
	next := &nextRunner{}
	r := Route(m, next)
	as := func(client string) context.Context {
		return sandbox.WithCaller(context.Background(), sandbox.Caller{Client: client})
	}

	res, err := r.Run(as("alice"), sandbox.Request{Language: "python", Packages: []string{"x==1"}, NewSession: &sandbox.NewSession{IdleTimeout: time.Second}})
	if err != nil || res.Session == "" || res.Sandbox != sandbox.ModeProcess || next.runs != 0 {
		t.Fatalf("creating a session: %+v, %v (next ran %d)", res, err, next.runs)
	}
	info, err := m.Check("alice", res.Session)
	if err != nil || info.IdleTimeout != time.Second || len(info.Packages) != 1 {
		t.Fatalf("the session made for alice: %+v, %v", info, err)
	}

	in := sandbox.Request{Language: "python", Code: "x", Session: res.Session}
	if got, err := r.Run(as("alice"), in); err != nil || got.Stdout != "x" || next.runs != 0 {
		t.Fatalf("alice's call in her session: %+v, %v (next ran %d)", got, err, next.runs)
	}
	_, theirs := r.Run(as("bob"), in)
	missing := in
	missing.Session = "ses_0000"
	_, none := r.Run(as("bob"), missing)
	if !errors.Is(theirs, ErrUnknownSession) || !errors.Is(none, ErrUnknownSession) {
		t.Fatalf("bob's call in alice's session: %v; in none: %v; want ErrUnknownSession", theirs, none)
	}
	if want := unknown(in.Session).Error(); theirs.Error() != want {
		t.Errorf("another client's session is refused with %q, want %q, as for any unknown id", theirs, want)
	}

	if got, err := r.Run(as("alice"), sandbox.Request{Language: "python", Code: "y"}); err != nil || got.Stdout != "next y" || next.runs != 1 {
		t.Fatalf("a call without a session: %+v, %v (next ran %d)", got, err, next.runs)
	}
}
