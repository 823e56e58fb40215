package tasks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"
)

// Config bounds a Memory store. Zero fields take the defaults.
type Config struct {
	// MaxRunTime stops a task's work after this long (default 1h).
	MaxRunTime time.Duration
	// KeepResult is how long an ended task is kept (default 10m); a
	// client may ask for less, never more.
	KeepResult time.Duration
	// MaxTasks is how many tasks are held at once, ended ones included
	// (default 1000). When it is reached, Create makes room by dropping
	// the ended task of the owner that holds the most that ended first,
	// and refuses only when no held task has ended.
	MaxTasks int
	// MaxClientTasks is how many tasks one owner may have that have not
	// ended (default 16).
	MaxClientTasks int
	// MaxBytes is how many bytes (Create's bytes) the tasks that have not
	// ended may hold, all owners together (default 256 MiB), and
	// MaxClientBytes those of one owner (default 64 MiB).
	MaxBytes, MaxClientBytes int64
	// PollInterval is suggested to clients (default 1s).
	PollInterval time.Duration
	// CancelGrace is how long Cancel waits for the work to stop (default 15s).
	CancelGrace time.Duration
	// IDPrefix starts every task id (the replica's id and a dot, where
	// replicas stand behind one address; see server/replicas).
	IDPrefix string
	// OnChange, if set, is called after each change of status with the
	// number of tasks held in each status (for metrics). It is called
	// without the store's lock, possibly from several goroutines.
	OnChange func(counts map[Status]int)
}

func (c *Config) defaults() {
	if c.MaxRunTime <= 0 {
		c.MaxRunTime = time.Hour
	}
	if c.KeepResult <= 0 {
		c.KeepResult = 10 * time.Minute
	}
	if c.MaxTasks <= 0 {
		c.MaxTasks = 1000
	}
	if c.MaxClientTasks <= 0 {
		c.MaxClientTasks = 16
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 256 << 20
	}
	if c.MaxClientBytes <= 0 {
		c.MaxClientBytes = 64 << 20
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.CancelGrace <= 0 {
		c.CancelGrace = 15 * time.Second
	}
}

// Memory is a Store that holds tasks in memory: they are lost when the
// process ends (their work with it).
type Memory struct {
	cfg Config

	mu     sync.Mutex
	tasks  map[string]*entry
	closed bool
	wg     sync.WaitGroup
	// use is what each owner's tasks that have not ended hold (owners
	// with none are not in it), bytes that of all owners.
	use   map[string]*use
	bytes int64
}

// use is what one owner's tasks that have not ended hold.
type use struct {
	tasks int
	bytes int64
}

var _ Store = (*Memory)(nil)

// entry is one task and what its work and the store need of it.
type entry struct {
	task   Task
	owner  string
	keep   time.Duration
	bytes  int64
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the work has returned
	expiry *time.Timer

	// Input: the open requests, every key ever used, the answers so far,
	// and a signal for Ask.
	used    map[string]bool
	answers map[string]json.RawMessage
	changed chan struct{}
}

// NewMemory returns an empty Memory store.
func NewMemory(cfg Config) *Memory {
	cfg.defaults()
	return &Memory{cfg: cfg, tasks: map[string]*entry{}, use: map[string]*use{}}
}

// newID returns an unguessable task id (128 random bits).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errCancelled is the cause of a task's context when Cancel stops it.
var errCancelled = errors.New("task cancelled")

// Create implements Store.
func (m *Memory) Create(owner string, keep time.Duration, bytes int64, fn Func) (Task, error) {
	if keep <= 0 || keep > m.cfg.KeepResult {
		keep = m.cfg.KeepResult
	}
	now := time.Now()
	e := &entry{
		owner: owner,
		keep:  keep,
		bytes: bytes,
		done:  make(chan struct{}),
		used:  map[string]bool{},
		task: Task{
			ID:           m.cfg.IDPrefix + newID(),
			Status:       StatusWorking,
			CreatedAt:    now,
			UpdatedAt:    now,
			TTL:          m.cfg.MaxRunTime + keep,
			PollInterval: m.cfg.PollInterval,
		},
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Task{}, ErrClosed
	}
	if err := m.admit(owner, bytes); err != nil {
		m.mu.Unlock()
		return Task{}, err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	ctx, stop := context.WithTimeoutCause(ctx, m.cfg.MaxRunTime, ErrMaxRunTime)
	e.cancel = cancel
	m.tasks[e.task.ID] = e
	u := m.use[owner]
	if u == nil {
		u = &use{}
		m.use[owner] = u
	}
	u.tasks++
	u.bytes += bytes
	m.bytes += bytes
	snapshot := e.snapshot()
	m.wg.Add(1)
	m.mu.Unlock()
	m.changed()

	go func() {
		defer m.wg.Done()
		defer stop()
		res, err := m.runWork(ctx, e, fn)
		m.finish(e, ctx, res, err)
	}()
	return snapshot, nil
}

// admit checks a new task of owner holding bytes against the caps, and
// makes room for it when the store is full of tasks of which some ended;
// call with the lock held.
func (m *Memory) admit(owner string, bytes int64) error {
	u := m.use[owner]
	if u == nil {
		u = &use{}
	}
	switch {
	case u.tasks >= m.cfg.MaxClientTasks:
		return &LimitError{Cap: CapClientTasks, Held: int64(u.tasks), Adding: 1, Max: int64(m.cfg.MaxClientTasks)}
	case u.bytes+bytes > m.cfg.MaxClientBytes:
		return &LimitError{Cap: CapClientBytes, Held: u.bytes, Adding: bytes, Max: m.cfg.MaxClientBytes}
	case m.bytes+bytes > m.cfg.MaxBytes:
		return &LimitError{Cap: CapBytes, Held: m.bytes, Adding: bytes, Max: m.cfg.MaxBytes}
	}
	for len(m.tasks) >= m.cfg.MaxTasks {
		if !m.dropEndedLocked() {
			return &LimitError{Cap: CapTasks, Held: int64(len(m.tasks)), Adding: 1, Max: int64(m.cfg.MaxTasks)}
		}
	}
	return nil
}

// dropEndedLocked drops, to make room, the task that ended first among
// those of the owner that holds the most tasks with some ended, and
// reports whether there was one; call with the lock held. So a client that
// keeps many results loses its oldest first, and the store refuses new
// tasks only when every task it holds still works.
func (m *Memory) dropEndedLocked() bool {
	held := map[string]int{}
	oldest := map[string]*entry{}
	for _, e := range m.tasks {
		held[e.owner]++
		if !e.finished() {
			continue
		}
		if o := oldest[e.owner]; o == nil || e.task.UpdatedAt.Before(o.task.UpdatedAt) {
			oldest[e.owner] = e
		}
	}
	var drop *entry
	for owner, e := range oldest {
		if drop == nil || held[owner] > held[drop.owner] || (held[owner] == held[drop.owner] && e.task.UpdatedAt.Before(drop.task.UpdatedAt)) {
			drop = e
		}
	}
	if drop == nil {
		return false
	}
	if drop.expiry != nil {
		drop.expiry.Stop()
	}
	delete(m.tasks, drop.task.ID)
	return true
}

// finished reports whether the task's work has returned; call with the
// store's lock held.
func (e *entry) finished() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// runWork calls fn, turning a panic into an error.
func (m *Memory) runWork(ctx context.Context, e *entry, fn Func) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("task panicked: %v", r)
		}
	}()
	return fn(ctx, input{m: m, e: e})
}

// finish records the work's outcome and schedules the task's removal.
func (m *Memory) finish(e *entry, ctx context.Context, res any, err error) {
	m.mu.Lock()
	if !e.task.Status.Terminal() {
		now := time.Now()
		switch {
		case err == nil:
			e.task.Status, e.task.Result, e.task.StatusMessage = StatusCompleted, res, ""
		case errors.Is(context.Cause(ctx), ErrMaxRunTime):
			e.task.Status, e.task.Err = StatusFailed, fmt.Errorf("%w (%s): %w", ErrMaxRunTime, m.cfg.MaxRunTime, err)
			e.task.StatusMessage = e.task.Err.Error()
		default:
			e.task.Status, e.task.Err, e.task.StatusMessage = StatusFailed, err, err.Error()
		}
		e.task.UpdatedAt = now
		e.task.InputRequests = nil
	}
	e.task.TTL = time.Since(e.task.CreatedAt) + e.keep
	// The work has returned: what it held is given back.
	if u := m.use[e.owner]; u != nil {
		u.tasks--
		u.bytes -= e.bytes
		if u.tasks == 0 {
			delete(m.use, e.owner)
		}
	}
	m.bytes -= e.bytes
	id := e.task.ID
	if m.closed {
		close(e.done)
		e.signal()
		m.mu.Unlock()
		return
	}
	e.expiry = time.AfterFunc(e.keep, func() {
		m.mu.Lock()
		if m.tasks[id] == e {
			delete(m.tasks, id)
		}
		m.mu.Unlock()
		m.changed()
	})
	close(e.done)
	e.signal()
	m.mu.Unlock()
	m.changed()
}

func (e *entry) signal() {
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// snapshot copies the task; call with the lock held.
func (e *entry) snapshot() Task {
	t := e.task
	t.InputRequests = maps.Clone(e.task.InputRequests)
	return t
}

func (m *Memory) lookup(owner, id string) (*entry, error) {
	e, ok := m.tasks[id]
	if !ok || e.owner != owner {
		return nil, fmt.Errorf("%w: %q (it never existed, belongs to another client, or ended more than its keep time ago)", ErrNotFound, id)
	}
	return e, nil
}

// Get implements Store.
func (m *Memory) Get(owner, id string) (Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.lookup(owner, id)
	if err != nil {
		return Task{}, err
	}
	return e.snapshot(), nil
}

// Update implements Store.
func (m *Memory) Update(owner, id string, answers map[string]json.RawMessage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.lookup(owner, id)
	if err != nil {
		return err
	}
	if e.task.Status.Terminal() {
		return fmt.Errorf("%w: %s", ErrTerminal, e.task.Status)
	}
	took := false
	for k, v := range answers {
		if _, open := e.task.InputRequests[k]; !open || e.answers == nil {
			continue
		}
		if _, dup := e.answers[k]; dup {
			continue
		}
		e.answers[k] = v
		took = true
	}
	if took {
		e.task.UpdatedAt = time.Now()
		e.signal()
	}
	return nil
}

// Cancel implements Store.
func (m *Memory) Cancel(owner, id string) (Task, error) {
	m.mu.Lock()
	e, err := m.lookup(owner, id)
	if err != nil {
		m.mu.Unlock()
		return Task{}, err
	}
	if e.task.Status.Terminal() {
		t := e.snapshot()
		m.mu.Unlock()
		return t, fmt.Errorf("%w: %s", ErrTerminal, t.Status)
	}
	e.task.Status = StatusCancelled
	e.task.StatusMessage = "cancelled by the client; the run was stopped"
	e.task.UpdatedAt = time.Now()
	e.task.InputRequests = nil
	e.cancel(errCancelled)
	e.signal()
	m.mu.Unlock()
	m.changed()

	// The work stops its run and cleans up before it returns (the
	// sandbox.Runner contract): waiting for it means that nothing of the
	// run is left once the client hears that the task is cancelled.
	select {
	case <-e.done:
	case <-time.After(m.cfg.CancelGrace):
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.snapshot(), nil
}

// Wait implements Store.
func (m *Memory) Wait(ctx context.Context, owner, id string) (Task, error) {
	m.mu.Lock()
	e, err := m.lookup(owner, id)
	m.mu.Unlock()
	if err != nil {
		return Task{}, err
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return Task{}, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.snapshot(), nil
}

// Counts returns how many tasks are held in each status.
func (m *Memory) Counts() map[Status]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := map[Status]int{}
	for _, e := range m.tasks {
		c[e.task.Status]++
	}
	return c
}

func (m *Memory) changed() {
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(m.Counts())
	}
}

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	m.closed = true
	for _, e := range m.tasks {
		if !e.task.Status.Terminal() {
			e.task.Status = StatusCancelled
			e.task.StatusMessage = "the server is shutting down"
			e.task.UpdatedAt = time.Now()
			e.cancel(ErrClosed)
		}
		if e.expiry != nil {
			e.expiry.Stop()
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// input is the Input of one task.
type input struct {
	m *Memory
	e *entry
}

func (in input) TaskID() string { return in.e.task.ID }

func (in input) Ask(ctx context.Context, requests map[string]any) (map[string]json.RawMessage, error) {
	m, e := in.m, in.e
	m.mu.Lock()
	if e.task.Status.Terminal() {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrTerminal, e.task.Status)
	}
	for k := range requests {
		if e.used[k] {
			m.mu.Unlock()
			return nil, fmt.Errorf("input key %q was already used in this task: each key may be asked once", k)
		}
	}
	for k := range requests {
		e.used[k] = true
	}
	e.task.Status = StatusInputRequired
	e.task.InputRequests = maps.Clone(requests)
	e.task.UpdatedAt = time.Now()
	e.answers = map[string]json.RawMessage{}
	m.mu.Unlock()
	m.changed()

	defer func() {
		m.mu.Lock()
		if e.task.Status == StatusInputRequired {
			e.task.Status = StatusWorking
			e.task.UpdatedAt = time.Now()
		}
		e.task.InputRequests = nil
		e.answers = nil
		m.mu.Unlock()
		m.changed()
	}()
	for {
		m.mu.Lock()
		if len(e.answers) == len(requests) {
			got := e.answers
			m.mu.Unlock()
			return got, nil
		}
		if e.task.Status.Terminal() {
			m.mu.Unlock()
			return nil, fmt.Errorf("%w: %s", ErrTerminal, e.task.Status)
		}
		if e.changed == nil {
			e.changed = make(chan struct{})
		}
		wake := e.changed
		m.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
