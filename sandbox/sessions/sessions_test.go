package sessions

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// fakeBackend starts fakeSessions, built from function fields.
type fakeBackend struct {
	mu      sync.Mutex
	started []*fakeSession
	start   func(Spec) error
	exec    func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error)
}

type fakeSession struct {
	spec   Spec
	b      *fakeBackend
	closed atomic.Int32
}

func (b *fakeBackend) Start(ctx context.Context, spec Spec) (Session, error) {
	if b.start != nil {
		if err := b.start(spec); err != nil {
			return nil, err
		}
	}
	s := &fakeSession{spec: spec, b: b}
	b.mu.Lock()
	b.started = append(b.started, s)
	b.mu.Unlock()
	return s, nil
}

func (s *fakeSession) Exec(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if s.b.exec != nil {
		return s.b.exec(ctx, req)
	}
	return &sandbox.Result{Stdout: req.Code}, nil
}

func (s *fakeSession) Close() error { s.closed.Add(1); return nil }

func (b *fakeBackend) open() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.started {
		if s.closed.Load() == 0 {
			n++
		}
	}
	return n
}

func newManager(t *testing.T, b Backend, mut func(*Config)) *Manager {
	t.Helper()
	cfg := Config{Backend: b, MaxSessions: 3, IdleTimeout: time.Hour, MaxLifetime: 24 * time.Hour}
	if mut != nil {
		mut(&cfg)
	}
	m := New(cfg)
	t.Cleanup(func() { _ = m.Shutdown() })
	return m
}

func py(code string) sandbox.Request { return sandbox.Request{Language: "python", Code: code} }

func TestIDsAreUnguessable(t *testing.T) {
	t.Parallel()
	m := newManager(t, &fakeBackend{}, func(c *Config) { c.MaxSessions = 1000 })
	seen := map[string]bool{}
	for range 200 {
		info, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		hexPart, ok := strings.CutPrefix(info.ID, "ses_")
		if !ok || len(hexPart) != 32 || strings.Trim(hexPart, "0123456789abcdef") != "" {
			t.Fatalf("id %q: want ses_ and 32 hex digits (128 bits)", info.ID)
		}
		if seen[info.ID] {
			t.Fatalf("id %q made twice", info.ID)
		}
		seen[info.ID] = true
	}
}

func TestOwnership(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{}
	m := newManager(t, b, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, "alice", CreateOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.Exec(ctx, "alice", info.ID, py("x = 1")); err != nil || res.Stdout != "x = 1" {
		t.Fatalf("owner's call: %v, %v", res, err)
	}
	for name, try := range map[string]func() error{
		"exec by another client":  func() error { _, err := m.Exec(ctx, "bob", info.ID, py("x")); return err },
		"close by another client": func() error { return m.Close("bob", info.ID) },
		"check by another client": func() error { _, err := m.Check("bob", info.ID); return err },
		"a wrong id": func() error {
			_, err := m.Exec(ctx, "alice", "ses_00000000000000000000000000000000", py("x"))
			return err
		},
		"an empty id": func() error { _, err := m.Exec(ctx, "alice", "", py("x")); return err },
	} {
		err := try()
		if !errors.Is(err, ErrUnknownSession) {
			t.Errorf("%s: err = %v, want ErrUnknownSession", name, err)
		}
	}
	if got := m.List("bob"); len(got) != 0 {
		t.Errorf("bob lists %v, want nothing", got)
	}
	if got := m.List("alice"); len(got) != 1 || got[0].ID != info.ID || got[0].Calls != 1 {
		t.Errorf("alice lists %+v, want her one session with 1 call", got)
	}
	if err := m.Close("alice", info.ID); err != nil {
		t.Fatal(err)
	}
	if b.open() != 0 {
		t.Errorf("the session's sandbox was not closed")
	}
	if _, err := m.Exec(ctx, "alice", info.ID, py("x")); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("exec after close: err = %v, want ErrUnknownSession", err)
	}
	if err := m.Close("alice", info.ID); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("second close: err = %v, want ErrUnknownSession", err)
	}
}

func TestWrongLanguage(t *testing.T) {
	t.Parallel()
	m := newManager(t, &fakeBackend{}, nil)
	info, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Exec(context.Background(), "a", info.ID, sandbox.Request{Language: "bash", Code: "ls"})
	if !errors.Is(err, ErrWrongLanguage) || !strings.Contains(err.Error(), "runs python, not bash") {
		t.Fatalf("err = %v, want ErrWrongLanguage naming both", err)
	}
}

func TestMaxSessions(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{}
	m := newManager(t, b, func(c *Config) { c.MaxSessions = 2 })
	ctx := context.Background()
	first, err := m.Create(ctx, "a", CreateOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "b", CreateOptions{Language: "python"}); err != nil {
		t.Fatal(err)
	}
	_, err = m.Create(ctx, "c", CreateOptions{Language: "python"})
	if !errors.Is(err, ErrTooManySessions) || !strings.Contains(err.Error(), "CODE_EXEC_MAX_SESSIONS") {
		t.Fatalf("third session: err = %v, want ErrTooManySessions naming the setting", err)
	}
	if err := m.Close("a", first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "c", CreateOptions{Language: "python"}); err != nil {
		t.Fatalf("after a close there is room again: %v", err)
	}
}

func TestFailedStartFreesItsSlot(t *testing.T) {
	t.Parallel()
	boom := errors.New("no engine")
	fail := true
	b := &fakeBackend{start: func(Spec) error {
		if fail {
			return boom
		}
		return nil
	}}
	m := newManager(t, b, func(c *Config) { c.MaxSessions = 1 })
	if _, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"}); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the backend's", err)
	}
	fail = false
	if _, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"}); err != nil {
		t.Fatalf("the failed start kept its slot: %v", err)
	}
}

func TestIdleExpiry(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{}
	m := newManager(t, b, func(c *Config) { c.IdleTimeout = 150 * time.Millisecond })
	ctx := context.Background()
	info, err := m.Create(ctx, "a", CreateOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	// Calls keep it alive past the idle timeout.
	for range 4 {
		time.Sleep(60 * time.Millisecond)
		if _, err := m.Exec(ctx, "a", info.ID, py("x")); err != nil {
			t.Fatalf("a session in use expired: %v", err)
		}
	}
	waitFor(t, func() bool { return m.Count() == 0 }, "the idle session to expire")
	if b.open() != 0 {
		t.Errorf("the expired session's sandbox was not closed")
	}
	if _, err := m.Exec(ctx, "a", info.ID, py("x")); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("exec after expiry: err = %v, want ErrUnknownSession", err)
	}
}

func TestOwnIdleTimeoutIsCapped(t *testing.T) {
	t.Parallel()
	m := newManager(t, &fakeBackend{}, func(c *Config) { c.IdleTimeout = time.Minute })
	short, err := m.Create(context.Background(), "a", CreateOptions{Language: "python", IdleTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	long, err := m.Create(context.Background(), "a", CreateOptions{Language: "python", IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if long.IdleTimeout != time.Minute {
		t.Errorf("a session asked for an hour and got %s, want the operator's minute", long.IdleTimeout)
	}
	waitFor(t, func() bool { _, err := m.Check("a", short.ID); return err != nil }, "the short session to expire")
	if _, err := m.Check("a", long.ID); err != nil {
		t.Errorf("the long session expired with the short one: %v", err)
	}
}

func TestBusySessionDoesNotIdleOut(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{exec: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		select {
		case <-time.After(400 * time.Millisecond):
			return &sandbox.Result{}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	m := newManager(t, b, func(c *Config) { c.IdleTimeout = 100 * time.Millisecond })
	info, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(context.Background(), "a", info.ID, py("long")); err != nil {
		t.Fatalf("a long call in a session with a short idle timeout: %v", err)
	}
}

func TestMaxLifetimeEndsABusySession(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{exec: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	m := newManager(t, b, func(c *Config) { c.MaxLifetime = 200 * time.Millisecond })
	info, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Exec(context.Background(), "a", info.ID, py("forever"))
	if !errors.Is(err, ErrUnknownSession) || !strings.Contains(err.Error(), "ended during the call") {
		t.Fatalf("err = %v, want the session's end", err)
	}
	// The janitor closes the sandbox after it stopped the call, so the
	// call may return first.
	for deadline := time.Now().Add(5 * time.Second); b.open() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if b.open() != 0 {
		t.Errorf("the session's sandbox was not closed")
	}
}

func TestCallsInASessionTakeTurns(t *testing.T) {
	t.Parallel()
	var inFlight, most atomic.Int32
	b := &fakeBackend{exec: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
		return &sandbox.Result{}, nil
	}}
	m := newManager(t, b, nil)
	info, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.Exec(context.Background(), "a", info.ID, py("x")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d calls ran at once in one session, want 1", most.Load())
	}
	if got := m.List("a")[0].Calls; got != 8 {
		t.Errorf("Calls = %d, want 8", got)
	}
}

func TestCloseOwnerAndShutdown(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{}
	m := New(Config{Backend: b, MaxSessions: 10, IdleTimeout: time.Hour, MaxLifetime: time.Hour})
	ctx := context.Background()
	for _, owner := range []string{"a", "a", "b"} {
		if _, err := m.Create(ctx, owner, CreateOptions{Language: "python"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.CloseOwner("a"); n != 2 || b.open() != 1 {
		t.Fatalf("CloseOwner ended %d, %d left open; want 2 and 1", n, b.open())
	}
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if b.open() != 0 {
		t.Fatalf("%d sessions left open after Shutdown", b.open())
	}
	if _, err := m.Create(ctx, "a", CreateOptions{Language: "python"}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("Create after Shutdown: err = %v, want sandbox.ErrClosed", err)
	}
	if err := m.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A session is idle from when it is ready: a start slower than the idle
// timeout does not end it before its first call.
func TestIdleCountsFromTheStart(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{start: func(Spec) error {
		time.Sleep(300 * time.Millisecond)
		return nil
	}}
	m := newManager(t, b, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	info, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the client's round trip
	if _, err := m.Exec(context.Background(), "a", info.ID, py("x")); err != nil {
		t.Fatalf("the first call, soon after a slow start: %v", err)
	}
}
