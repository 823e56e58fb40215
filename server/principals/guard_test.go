package principals

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// principalOf parses one principal with the fields of yaml (indented by
// four spaces) over testDefaults.
func principalOf(t *testing.T, name, yaml string) *Principal {
	t.Helper()
	list, err := Parse([]byte("principals:\n  - name: "+name+"\n    token_sha256: "+hashOf(name)+"\n"+yaml), testDefaults(t))
	if err != nil {
		t.Fatal(err)
	}
	return list[0]
}

// blocking is a runner whose runs wait until release is closed, saying on
// started when each begins.
type blocking struct {
	started chan sandbox.Request
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{started: make(chan sandbox.Request, 16), release: make(chan struct{})}
}

func (b *blocking) runner() *sandboxtest.Fake {
	return &sandboxtest.Fake{RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		b.started <- req
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &sandbox.Result{}, nil
	}}
}

func pyReq() sandbox.Request {
	return sandbox.Request{Language: "python", Code: "print(1)", Limits: sandbox.Limits{Timeout: 10 * time.Second, MemoryBytes: 64 << 20, CPUs: 0.5}}
}

// TestGuardConcurrency: a principal's run over its max_concurrent is
// refused at once, saying when to retry, while another principal's runs
// go on; once the first run ends, the principal may run again.
func TestGuardConcurrency(t *testing.T) {
	t.Parallel()
	b := newBlocking()
	g := NewGuard(b.runner())
	one := principalOf(t, "one", "    max_concurrent: 1\n")
	other := principalOf(t, "other", "")
	ctxOne, ctxOther := WithPrincipal(context.Background(), one), WithPrincipal(context.Background(), other)

	first := make(chan error, 1)
	go func() { _, err := g.Run(ctxOne, pyReq()); first <- err }()
	<-b.started
	_, err := g.Run(ctxOne, pyReq())
	var le *LimitedError
	if !errors.As(err, &le) || le.Field != "max_concurrent" || le.Principal != "one" || !errors.Is(err, ErrRefused) {
		t.Fatalf("a second concurrent run of principal one: %v, want a *LimitedError of max_concurrent", err)
	}
	if want := "Principal one already has 1 request running or waiting, its most (max_concurrent: 1), so this one did not run: retry once one of them has ended."; err.Error() != want {
		t.Errorf("the refusal says %q, want %q", err, want)
	}
	// The other principal is not held back: its runs start while one's
	// is in flight.
	others := make(chan error, 2)
	for range 2 {
		go func() { _, err := g.Run(ctxOther, pyReq()); others <- err }()
	}
	<-b.started
	<-b.started
	if n := g.InFlight("one"); n != 1 {
		t.Errorf("principal one has %d requests in flight, want 1", n)
	}
	close(b.release)
	for _, ch := range []chan error{first, others, others} {
		if err := <-ch; err != nil {
			t.Errorf("a run that was let through failed: %v", err)
		}
	}
	if _, err := g.Run(ctxOne, pyReq()); err != nil {
		t.Errorf("principal one's run after its first ended: %v", err)
	}
	if n := g.InFlight("one"); n != 0 {
		t.Errorf("principal one has %d requests in flight after they all ended, want 0", n)
	}
}

// TestGuardRate: runs_per_minute lets that many runs start in a burst,
// then refuses with the time until the next one may start, on synctest's
// clock; a refused run uses none of the rate; other principals are not
// counted.
func TestGuardRate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ran := 0
		g := NewGuard(&sandboxtest.Fake{RunFunc: func(context.Context, sandbox.Request) (*sandbox.Result, error) {
			ran++
			return &sandbox.Result{}, nil
		}})
		limited := principalOf(t, "limited", "    runs_per_minute: 2\n")
		free := principalOf(t, "free", "")
		ctx := WithPrincipal(context.Background(), limited)
		for i := range 2 {
			if _, err := g.Run(ctx, pyReq()); err != nil {
				t.Fatalf("run %d of 2 in a minute: %v", i+1, err)
			}
		}
		_, err := g.Run(ctx, pyReq())
		var le *LimitedError
		if !errors.As(err, &le) || le.Field != "runs_per_minute" || !near(le.RetryAfter, 30*time.Second) {
			t.Fatalf("the third run in a minute: %v (retry after %v), want a refusal of runs_per_minute, retry after 30s", err, le)
		}
		if want := "Principal limited is over its rate of 2 runs a minute (runs_per_minute: 2), so this one did not run: retry in 30 s."; err.Error() != want {
			t.Errorf("the refusal says %q, want %q", err, want)
		}
		for range 5 {
			if _, err := g.Run(WithPrincipal(context.Background(), free), pyReq()); err != nil {
				t.Errorf("a principal without a rate was refused: %v", err)
			}
		}
		time.Sleep(29 * time.Second)
		_, err = g.Run(ctx, pyReq())
		if !errors.As(err, &le) || !near(le.RetryAfter, time.Second) {
			t.Errorf("a second before the retry time: %v, want a refusal with a second to wait", err)
		}
		time.Sleep(time.Second)
		if _, err := g.Run(ctx, pyReq()); err != nil {
			t.Errorf("at the retry time the refusal said: %v", err)
		}
		if ran != 8 {
			t.Errorf("the runner ran %d requests, want 8", ran)
		}
	})
}

// TestGuardReloadedRate: a reload that changes a principal's rate applies
// from the reload on, keeping what it used.
func TestGuardReloadedRate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := NewGuard(&sandboxtest.Fake{})
		before := principalOf(t, "p", "    runs_per_minute: 1\n")
		if _, err := g.Run(WithPrincipal(context.Background(), before), pyReq()); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Run(WithPrincipal(context.Background(), before), pyReq()); err == nil {
			t.Fatal("a second run in a minute at runs_per_minute 1 was let through")
		}
		after := principalOf(t, "p", "    runs_per_minute: 120\n")
		g.Reloaded([]*Principal{after})
		time.Sleep(500 * time.Millisecond)
		if _, err := g.Run(WithPrincipal(context.Background(), after), pyReq()); err != nil {
			t.Errorf("after a reload to 120 a minute, half a second later: %v", err)
		}
	})
}

func TestGuardRefusesWhatThePolicyDoesNotAllow(t *testing.T) {
	t.Parallel()
	var got []sandbox.Request
	var mu sync.Mutex
	g := NewGuard(&sandboxtest.Fake{RunFunc: func(_ context.Context, req sandbox.Request) (*sandbox.Result, error) {
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		return &sandbox.Result{}, nil
	}})
	p := principalOf(t, "narrow", "    languages: [python]\n    files: none\n    packages: false\n    max_sessions: 0\n    max_timeout: 5s\n    memory: 64m\n    cpus: 0.5\n")
	ctx := WithPrincipal(context.Background(), p)
	with := func(f func(*sandbox.Request)) sandbox.Request {
		r := pyReq()
		r.Limits.Timeout = 5 * time.Second
		f(&r)
		return r
	}
	for _, c := range []struct {
		name, field string
		req         sandbox.Request
		want        string
	}{
		{"language", "languages", with(func(r *sandbox.Request) { r.Language = "javascript" }),
			"Principal narrow may not run javascript code (its languages: python), so the request was refused: use python."},
		{"timeout", "max_timeout", with(func(r *sandbox.Request) { r.Limits.Timeout = 6 * time.Second }),
			"A timeout of 6 seconds is above principal narrow's cap of 5 seconds (its max_timeout), so the request was refused: ask for at most 5."},
		{"files", "files", with(func(r *sandbox.Request) { r.Files = []artifacts.Input{{Path: "a.csv", Data: []byte("1")}} }),
			"Principal narrow may not send files (its files: none), so the request was refused: put the data in the code or in stdin instead."},
		{"packages", "packages", with(func(r *sandbox.Request) { r.Packages = []string{"requests==2.31.0"} }),
			"Principal narrow may not install packages (its packages: false), so the request was refused: use what the sandbox has installed."},
		{"session", "max_sessions", with(func(r *sandbox.Request) { r.Session = "ses_1" }),
			"Principal narrow may not use sessions (its max_sessions: 0), so the request was refused: run without a session."},
		{"new session", "max_sessions", with(func(r *sandbox.Request) { r.NewSession = &sandbox.NewSession{} }),
			"Principal narrow may not use sessions (its max_sessions: 0), so the request was refused: run without a session."},
		{"memory", "memory", with(func(r *sandbox.Request) { r.Limits.MemoryBytes = 65 << 20 }),
			"The request's limits are above principal narrow's memory or CPUs, so it was refused; this is a server-side problem, so tell the operator."},
	} {
		_, err := g.Run(ctx, c.req)
		var re *RefusedError
		if !errors.As(err, &re) || re.Field != c.field || err.Error() != c.want {
			t.Errorf("%s: %v (field %v), want %q", c.name, err, re, c.want)
		}
	}
	if len(got) != 0 {
		t.Errorf("refused requests reached the runner: %d", len(got))
	}
	if _, err := g.Run(context.Background(), pyReq()); err == nil || !strings.Contains(err.Error(), "names no principal") {
		t.Errorf("a request without a principal: %v, want a refusal", err)
	}
}

// TestGuardNarrows: what the guard lets through reaches only the
// principal's network, brings no artifacts back unless its files are rw,
// and counts a new session against its max_sessions.
func TestGuardNarrows(t *testing.T) {
	t.Parallel()
	var got sandbox.Request
	g := NewGuard(&sandboxtest.Fake{RunFunc: func(_ context.Context, req sandbox.Request) (*sandbox.Result, error) {
		got = req
		return &sandbox.Result{}, nil
	}})
	p := principalOf(t, "net", "    network_allow: [\"api.example.com:443\"]\n    files: ro\n    max_sessions: 2\n")
	ctx := WithPrincipal(context.Background(), p)
	req := pyReq()
	req.Artifacts = &artifacts.Options{MaxArtifacts: 5}
	if _, err := g.Run(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got.Network == nil || strings.Join(got.Network.Strings(), ",") != "api.example.com:443" || got.Artifacts != nil {
		t.Errorf("the run went on with network %v and artifacts %v", got.Network.Strings(), got.Artifacts)
	}
	req = sandbox.Request{Language: "python", NewSession: &sandbox.NewSession{IdleTimeout: time.Minute}}
	if _, err := g.Run(ctx, req); err != nil {
		t.Fatal(err)
	}
	if q := got.NewSession.Quota; q.Key != "principal:net" || q.Max != 2 || q.Setting != "principal net's max_sessions" || got.NewSession.IdleTimeout != time.Minute {
		t.Errorf("the new session went on with %+v", got.NewSession)
	}
	if req.NewSession.Quota.Key != "" {
		t.Error("the guard changed the caller's NewSession")
	}
	free := principalOf(t, "free", "")
	if _, err := g.Run(WithPrincipal(context.Background(), free), sandbox.Request{Language: "bash", Code: "true", Artifacts: &artifacts.Options{}}); err != nil {
		t.Fatal(err)
	}
	if got.Network != nil || got.Artifacts == nil {
		t.Errorf("a principal with the server's settings was narrowed: network %v, artifacts %v", got.Network, got.Artifacts)
	}
}

// near reports whether d is within a millisecond of want (the limiter
// computes in floating point).
func near(d, want time.Duration) bool { return d > want-time.Millisecond && d < want+time.Millisecond }
