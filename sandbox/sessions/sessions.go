// Package sessions keeps code-execution sessions: a sandbox that lives
// across calls, so that a call sees the files, the working directory and,
// for python and javascript, the variables of the calls before it, as in a
// notebook.
//
// A Manager owns the sessions of one server: it makes their ids, checks
// that only the client that created a session uses it, bounds how many
// exist at once, and ends them when they have been idle too long, when they
// reach their maximum lifetime, when their client closes them and when the
// server stops. A Backend, one per sandbox mode, starts the sandbox of a
// session (a container in docker mode, a supervised process in process mode
// and in mode none) with the same lockdown as a run.
//
// Inside a python or javascript session a small driver program keeps one
// interpreter alive and runs each call's code in a persistent namespace
// (see protocol.go and drivers/). bash sessions keep files and the working
// directory only: each call is a fresh bash in the session's directory.
package sessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// Backend starts the sandbox of a session. It is implemented once per
// sandbox mode, next to that mode's Runner.
type Backend interface {
	// Start starts a session's sandbox as spec says, locked down exactly as
	// a run of the same mode. ctx bounds the start only. The caller must
	// Close the Session. Errors wrap the sentinel errors of package sandbox
	// (ErrLanguageUnavailable, ErrSandboxUnavailable, ErrClosed).
	Start(ctx context.Context, spec Spec) (Session, error)
}

// Spec says what session to start.
type Spec struct {
	// ID is the session's id, for labels and logs.
	ID string
	// Language is the canonical language of every call in the session.
	Language string
	// Limits are the limits of the session's sandbox (memory, CPUs,
	// processes, open files, file size); each call brings its own timeout
	// and output cap.
	Limits sandbox.Limits
	// Deadline is when the Manager ends the session at the latest; the
	// backend may mark its resources with it (so that another server can
	// tell a leftover) and stop them by itself after it.
	Deadline time.Time
	// Packages are the packages the session asked for at its creation
	// (session_create's packages argument); the packages layer
	// (sandbox/packages.Sessions) installs them and sets PackageDir.
	Packages []string
	// PackageDir, when not nil, is the folder of installed packages that
	// every call of the session sees read-only (see sandbox.Request).
	PackageDir *sandbox.PackageDir
	// Network, when not nil, narrows what every call of the session may
	// reach through the egress proxy, as sandbox.Request.Network narrows a
	// run's: the backend restricts the session's proxy session with it
	// before the first call.
	Network *egress.Allowlist
}

// Session is a started session's sandbox.
type Session interface {
	// Exec runs one call in the session and waits for it. A program that
	// ran is a Result with a nil error, whatever its exit status; a call
	// that ended the interpreter (timeout, memory, output cap, crash) has
	// StateLost set, and the next call runs in a fresh one. Cancelling ctx
	// stops the call (the interpreter too) and Exec returns ctx's error.
	// Calls do not overlap: the Manager runs one at a time.
	Exec(ctx context.Context, req sandbox.Request) (*sandbox.Result, error)
	// Close stops everything the session runs and removes its files and
	// containers; a call in flight is stopped. It is safe to call twice.
	Close() error
}

// Errors of the Manager. They are meant to be shown to the client as they
// are.
var (
	// ErrUnknownSession: no session with this id belongs to the caller
	// (it never existed, was closed or expired, or is another client's:
	// the error does not say which).
	ErrUnknownSession = errors.New("unknown session")
	// ErrTooManySessions: CODE_EXEC_MAX_SESSIONS sessions exist already.
	ErrTooManySessions = errors.New("too many sessions")
	// ErrWrongLanguage: a call's language is not its session's.
	ErrWrongLanguage = errors.New("wrong language for this session")
)

// Config configures a Manager.
type Config struct {
	// Backend starts the sessions' sandboxes.
	Backend Backend
	// MaxSessions is how many sessions may exist at once, all clients
	// together (CODE_EXEC_MAX_SESSIONS); 0 allows none.
	MaxSessions int
	// IdleTimeout ends a session that no call has used for that long
	// (CODE_EXEC_SESSION_IDLE_TIMEOUT).
	IdleTimeout time.Duration
	// MaxLifetime ends a session that long after it was created, busy or
	// not (CODE_EXEC_SESSION_MAX_LIFETIME).
	MaxLifetime time.Duration
	// IDPrefix starts every session id (the replica's id and a dot, where
	// replicas stand behind one address; see server/replicas).
	IDPrefix string
	// Logger receives the sessions' comings and goings; nil discards.
	Logger *slog.Logger
}

// Info describes one session, as session_list reports it.
type Info struct {
	ID       string    `json:"session_id"`
	Language string    `json:"language"`
	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"last_used"`
	// Calls counts the calls made in the session.
	Calls int `json:"calls"`
	// Busy is set while a call runs.
	Busy bool `json:"busy"`
	// IdleTimeout is the session's own idle timeout.
	IdleTimeout time.Duration `json:"-"`
	// Expires is when the session ends if it stays idle (or reaches its
	// maximum lifetime, whichever comes first).
	Expires time.Time `json:"expires"`
	// Packages are the packages the session was created with.
	Packages []string `json:"packages,omitempty"`
}

// Manager keeps the sessions of one server. It is safe for concurrent use.
// Close ends every session.
type Manager struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	sessions map[string]*entry
	starting int // sessions being started, counted against MaxSessions
	// startingBy counts the sessions being started by quota key.
	startingBy map[string]int
	closed     bool

	stop    chan struct{}
	stopped chan struct{}
	kick    chan struct{} // wakes the janitor when a session is added
}

// entry is one session of the Manager.
type entry struct {
	id, owner, lang string
	quota           string // the Quota.Key it was created with
	packages        []string
	created         time.Time
	idle            time.Duration
	deadline        time.Time
	sess            Session

	// turn is held by the call in flight (a channel, so that a waiting
	// call can give up when its ctx ends).
	turn chan struct{}

	// Guarded by Manager.mu.
	lastUsed time.Time
	calls    int
	busy     bool
	gone     bool
	// cancel stops the call in flight, if any.
	cancel context.CancelFunc
}

// New returns a Manager and starts its janitor, which ends idle and
// expired sessions.
func New(cfg Config) *Manager {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, log: log, now: time.Now, sessions: map[string]*entry{}, startingBy: map[string]int{}, stop: make(chan struct{}), stopped: make(chan struct{}), kick: make(chan struct{}, 1)}
	go m.janitor()
	return m
}

// newID returns 128 random bits, hex-encoded, after a prefix that makes an
// id easy to recognize.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return "ses_" + hex.EncodeToString(b)
}

// CreateOptions are what a client may choose for a new session.
type CreateOptions struct {
	// Language is the canonical language of the session.
	Language string
	// Limits are the session sandbox's limits (already capped by the
	// operator's).
	Limits sandbox.Limits
	// IdleTimeout, if above 0 and below the Manager's, is the session's
	// own idle timeout.
	IdleTimeout time.Duration
	// Packages are given to the Backend in Spec.Packages.
	Packages []string
	// Network is given to the Backend in Spec.Network.
	Network *egress.Allowlist
	// Quota, when its Key is set, caps the sessions that share that key
	// (a principal's max_sessions) besides the Manager's MaxSessions.
	Quota sandbox.SessionQuota
}

// Create starts a session for owner, the key of the client that asks (its
// MCP session id, or its credentials). It fails with ErrTooManySessions when
// the limit is reached, sandbox.ErrClosed after Close, or the Backend's error.
func (m *Manager) Create(ctx context.Context, owner string, o CreateOptions) (Info, error) {
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return Info{}, fmt.Errorf("sessions: %w", sandbox.ErrClosed)
	case len(m.sessions)+m.starting >= m.cfg.MaxSessions:
		n := len(m.sessions) + m.starting
		m.mu.Unlock()
		return Info{}, fmt.Errorf("%w: this server allows at most %d at once (CODE_EXEC_MAX_SESSIONS) and %d exist", ErrTooManySessions, m.cfg.MaxSessions, n)
	case o.Quota.Key != "" && m.quotaHeldLocked(o.Quota.Key) >= o.Quota.Max:
		n := m.quotaHeldLocked(o.Quota.Key)
		m.mu.Unlock()
		return Info{}, fmt.Errorf("%w: %s allows at most %d at once and %d exist", ErrTooManySessions, o.Quota.Setting, o.Quota.Max, n)
	}
	m.starting++
	m.startingBy[o.Quota.Key]++
	m.mu.Unlock()
	started := func() {
		m.starting--
		if m.startingBy[o.Quota.Key]--; m.startingBy[o.Quota.Key] <= 0 {
			delete(m.startingBy, o.Quota.Key)
		}
	}
	release := func() {
		m.mu.Lock()
		started()
		m.mu.Unlock()
	}

	now := m.now()
	idle := m.cfg.IdleTimeout
	if o.IdleTimeout > 0 && o.IdleTimeout < idle {
		idle = o.IdleTimeout
	}
	e := &entry{id: m.cfg.IDPrefix + newID(), owner: owner, quota: o.Quota.Key, lang: o.Language, packages: o.Packages, created: now, idle: idle,
		deadline: now.Add(m.cfg.MaxLifetime), lastUsed: now, turn: make(chan struct{}, 1)}
	sess, err := m.cfg.Backend.Start(ctx, Spec{ID: e.id, Language: o.Language, Limits: o.Limits, Deadline: e.deadline, Packages: o.Packages, Network: o.Network})
	if err != nil {
		release()
		return Info{}, err
	}
	e.sess = sess
	m.mu.Lock()
	// Idle from when it is ready: a start slower than the idle timeout
	// (a busy engine) must not end the session before its first call.
	e.lastUsed = m.now()
	started()
	if m.closed {
		m.mu.Unlock()
		_ = sess.Close()
		return Info{}, fmt.Errorf("sessions: %w", sandbox.ErrClosed)
	}
	m.sessions[e.id] = e
	info := m.infoLocked(e)
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
	m.log.Info("session created", "session", e.id, "language", e.lang, "idle_timeout", idle, "deadline", e.deadline)
	return info, nil
}

// quotaHeldLocked counts the sessions of quota key key, open or being
// started; the caller holds mu.
func (m *Manager) quotaHeldLocked(key string) int {
	n := m.startingBy[key]
	for _, e := range m.sessions {
		if e.quota == key {
			n++
		}
	}
	return n
}

// unknown is the error for an id that the owner cannot use.
func unknown(id string) error {
	return fmt.Errorf("%w %q: it does not exist, was closed or expired, or was created by another client", ErrUnknownSession, truncate(id, 80))
}

// lookup finds owner's session id; the caller holds mu.
func (m *Manager) lookupLocked(owner, id string) (*entry, error) {
	e, ok := m.sessions[id]
	if !ok || e.owner != owner || e.gone {
		return nil, unknown(id)
	}
	return e, nil
}

// Check reports whether owner may use session id and which language it runs.
func (m *Manager) Check(owner, id string) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.lookupLocked(owner, id)
	if err != nil {
		return Info{}, err
	}
	return m.infoLocked(e), nil
}

// Exec runs req in owner's session id, after the call in flight there, if
// any. It fails with ErrUnknownSession when the session is not owner's (or
// ends while the call waits), ErrWrongLanguage when req's language is not
// the session's, or the session's own error.
func (m *Manager) Exec(ctx context.Context, owner, id string, req sandbox.Request) (*sandbox.Result, error) {
	m.mu.Lock()
	e, err := m.lookupLocked(owner, id)
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if req.Language != e.lang {
		return nil, fmt.Errorf("%w: session %s runs %s, not %s", ErrWrongLanguage, e.id, e.lang, req.Language)
	}
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the session's call in flight: %w", ctx.Err())
	}
	defer func() { <-e.turn }()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.mu.Lock()
	if e.gone {
		m.mu.Unlock()
		return nil, unknown(id)
	}
	e.busy, e.cancel = true, cancel
	m.mu.Unlock()

	res, err := e.sess.Exec(ctx, req)

	m.mu.Lock()
	e.busy, e.cancel = false, nil
	e.calls++
	e.lastUsed = m.now()
	gone := e.gone
	m.mu.Unlock()
	if gone && err != nil {
		return res, fmt.Errorf("%w: the session ended during the call (%v)", ErrUnknownSession, err)
	}
	return res, err
}

// Close ends owner's session id and waits until its sandbox is gone. It
// fails with ErrUnknownSession when the session is not owner's.
func (m *Manager) Close(owner, id string) error {
	m.mu.Lock()
	e, err := m.lookupLocked(owner, id)
	if err == nil {
		m.detachLocked(e)
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	m.end(e, "closed by its client")
	return nil
}

// CloseOwner ends every session of owner (for a client that went away, if
// the server wants that) and returns how many it ended.
func (m *Manager) CloseOwner(owner string) int {
	m.mu.Lock()
	var ended []*entry
	for _, e := range m.sessions {
		if e.owner == owner {
			m.detachLocked(e)
			ended = append(ended, e)
		}
	}
	m.mu.Unlock()
	for _, e := range ended {
		m.end(e, "its client went away")
	}
	return len(ended)
}

// detachLocked takes e out of the Manager and stops its call in flight; the
// caller holds mu and then calls end.
func (m *Manager) detachLocked(e *entry) {
	e.gone = true
	delete(m.sessions, e.id)
	if e.cancel != nil {
		e.cancel()
	}
}

// end closes a detached session's sandbox.
func (m *Manager) end(e *entry, why string) {
	if err := e.sess.Close(); err != nil {
		m.log.Warn("could not clean a session up", "session", e.id, "err", err)
	}
	m.log.Info("session ended", "session", e.id, "language", e.lang, "reason", why)
}

// List returns owner's sessions, oldest first.
func (m *Manager) List(owner string) []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Info
	for _, e := range m.sessions {
		if e.owner == owner {
			out = append(out, m.infoLocked(e))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// Count returns how many sessions exist, all owners together.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Limits returns the Manager's configuration of the limits, for reports.
func (m *Manager) Limits() (maxSessions int, idle, lifetime time.Duration) {
	return m.cfg.MaxSessions, m.cfg.IdleTimeout, m.cfg.MaxLifetime
}

func (m *Manager) infoLocked(e *entry) Info {
	exp := e.lastUsed.Add(e.idle)
	if e.deadline.Before(exp) {
		exp = e.deadline
	}
	return Info{ID: e.id, Language: e.lang, Created: e.created, LastUsed: e.lastUsed, Calls: e.calls, Busy: e.busy, IdleTimeout: e.idle, Expires: exp, Packages: e.packages}
}

// nextCheck is how long the janitor may sleep: until the earliest moment a
// session may expire (a busy one only at its deadline), within [10ms, 5s].
func (m *Manager) nextCheck() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	d := 5 * time.Second
	for _, e := range m.sessions {
		exp := e.deadline
		if !e.busy && e.lastUsed.Add(e.idle).Before(exp) {
			exp = e.lastUsed.Add(e.idle)
		}
		d = min(d, exp.Sub(now))
	}
	return max(d, 10*time.Millisecond)
}

// janitor ends sessions as they expire, until Shutdown. Create wakes it, so
// that a new session's own idle timeout counts from the start.
func (m *Manager) janitor() {
	defer close(m.stopped)
	t := time.NewTimer(m.nextCheck())
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		case <-t.C:
			m.expire()
		}
		t.Reset(m.nextCheck())
	}
}

// expire ends the sessions idle for longer than their idle timeout (a busy
// session is never idle) and those past their maximum lifetime.
func (m *Manager) expire() {
	now := m.now()
	type ended struct {
		e   *entry
		why string
	}
	var out []ended
	m.mu.Lock()
	for _, e := range m.sessions {
		switch {
		case !now.Before(e.deadline):
			m.detachLocked(e)
			out = append(out, ended{e, "it reached its maximum lifetime"})
		case !e.busy && now.Sub(e.lastUsed) >= e.idle:
			m.detachLocked(e)
			out = append(out, ended{e, "it was idle for " + e.idle.String()})
		}
	}
	m.mu.Unlock()
	for _, x := range out {
		m.end(x.e, x.why)
	}
}

// Shutdown ends every session, waits for their sandboxes to be gone, and
// makes Create fail from then on. It is safe to call twice.
func (m *Manager) Shutdown() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	all := make([]*entry, 0, len(m.sessions))
	for _, e := range m.sessions {
		m.detachLocked(e)
		all = append(all, e)
	}
	m.mu.Unlock()
	close(m.stop)
	<-m.stopped
	var wg sync.WaitGroup
	for _, e := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.end(e, "the server is stopping")
		}()
	}
	wg.Wait()
	return nil
}
