package sessions

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// TestQuota: the sessions of a quota key (a principal's) are capped across
// their owners (its MCP clients), besides the Manager's cap, naming the
// setting; a failed start frees its place; other keys are not counted.
func TestQuota(t *testing.T) {
	t.Parallel()
	fail := false
	b := &fakeBackend{start: func(Spec) error {
		if fail {
			return errors.New("no engine")
		}
		return nil
	}}
	m := newManager(t, b, func(c *Config) { c.MaxSessions = 10 })
	ctx := context.Background()
	q := sandbox.SessionQuota{Key: "principal:p", Max: 2, Setting: "principal p's max_sessions"}
	first, err := m.Create(ctx, "client-1", CreateOptions{Language: "python", Quota: q})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "client-2", CreateOptions{Language: "python", Quota: q}); err != nil {
		t.Fatal(err)
	}
	_, err = m.Create(ctx, "client-3", CreateOptions{Language: "python", Quota: q})
	if want := "too many sessions: principal p's max_sessions allows at most 2 at once and 2 exist"; !errors.Is(err, ErrTooManySessions) || err.Error() != want {
		t.Fatalf("a third session of the key: %v, want %q", err, want)
	}
	if _, err := m.Create(ctx, "client-3", CreateOptions{Language: "python", Quota: sandbox.SessionQuota{Key: "principal:other", Max: 1}}); err != nil {
		t.Errorf("another key's session: %v", err)
	}
	if err := m.Close("client-1", first.ID); err != nil {
		t.Fatal(err)
	}
	fail = true
	if _, err := m.Create(ctx, "client-3", CreateOptions{Language: "python", Quota: q}); err == nil {
		t.Fatal("the backend's failure was not returned")
	}
	fail = false
	if _, err := m.Create(ctx, "client-3", CreateOptions{Language: "python", Quota: q}); err != nil {
		t.Errorf("after a close and a failed start there is room again: %v", err)
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

// TestIdleExpiry: calls keep a session alive past its idle timeout; it
// ends exactly the idle timeout after its last call, not a moment before
// (on synctest's clock, which a busy machine cannot stretch).
func TestIdleExpiry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &fakeBackend{}
		m := newManager(t, b, func(c *Config) { c.IdleTimeout = 150 * time.Millisecond })
		ctx := context.Background()
		info, err := m.Create(ctx, "a", CreateOptions{Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		// Calls 100ms apart keep it alive past the idle timeout.
		for range 4 {
			time.Sleep(100 * time.Millisecond)
			if _, err := m.Exec(ctx, "a", info.ID, py("x")); err != nil {
				t.Fatalf("a session in use expired: %v", err)
			}
		}
		time.Sleep(150*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		if m.Count() != 1 {
			t.Fatalf("the session ended before it had been idle for its idle timeout")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if m.Count() != 0 {
			t.Fatalf("the session is still there after it has been idle for its idle timeout")
		}
		if b.open() != 0 {
			t.Errorf("the expired session's sandbox was not closed")
		}
		if _, err := m.Exec(ctx, "a", info.ID, py("x")); !errors.Is(err, ErrUnknownSession) {
			t.Errorf("exec after expiry: err = %v, want ErrUnknownSession", err)
		}
	})
}

// TestOwnIdleTimeoutIsCapped: a session's own idle timeout counts when it
// is shorter than the operator's, and is capped by it when it is longer.
func TestOwnIdleTimeoutIsCapped(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if _, err := m.Check("a", short.ID); err == nil {
			t.Errorf("the short session is still there after its own 100ms idle timeout")
		}
		if _, err := m.Check("a", long.ID); err != nil {
			t.Fatalf("the long session expired with the short one: %v", err)
		}
		time.Sleep(time.Minute - 100*time.Millisecond)
		synctest.Wait()
		if _, err := m.Check("a", long.ID); err == nil {
			t.Errorf("the long session is still there after the operator's one-minute idle timeout")
		}
	})
}

// TestBusySessionDoesNotIdleOut: a call longer than the idle timeout keeps
// the session; its idle time counts from the call's end.
func TestBusySessionDoesNotIdleOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
		time.Sleep(100*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		if _, err := m.Check("a", info.ID); err != nil {
			t.Fatalf("the session ended less than its idle timeout after its call: %v", err)
		}
	})
}

// TestMaxLifetimeEndsABusySession: at its maximum lifetime a session ends,
// its call in flight stopped and its sandbox closed.
func TestMaxLifetimeEndsABusySession(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &fakeBackend{exec: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}}
		m := newManager(t, b, func(c *Config) { c.MaxLifetime = 200 * time.Millisecond })
		start := time.Now()
		info, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Exec(context.Background(), "a", info.ID, py("forever"))
		if !errors.Is(err, ErrUnknownSession) || !strings.Contains(err.Error(), "ended during the call") {
			t.Fatalf("err = %v, want the session's end", err)
		}
		if took := time.Since(start); took != 200*time.Millisecond {
			t.Errorf("the session ended %v after its creation, want at its 200ms maximum lifetime", took)
		}
		// The janitor closes the sandbox after it stopped the call.
		synctest.Wait()
		if b.open() != 0 {
			t.Errorf("the session's sandbox was not closed")
		}
	})
}

func TestCallsInASessionTakeTurns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
	})
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

// A session is idle from when it is ready: a start slower than the idle
// timeout does not end it before its first call.
func TestIdleCountsFromTheStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &fakeBackend{start: func(Spec) error {
			time.Sleep(300 * time.Millisecond)
			return nil
		}}
		m := newManager(t, b, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
		info, err := m.Create(context.Background(), "a", CreateOptions{Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200*time.Millisecond - time.Nanosecond) // the client's round trip, as long as it may be
		if _, err := m.Exec(context.Background(), "a", info.ID, py("x")); err != nil {
			t.Fatalf("the first call, within the idle timeout of a slow start's end: %v", err)
		}
	})
}
