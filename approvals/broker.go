package approvals

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Errors of Broker.Decide.
var (
	// ErrUnknownRequest: no request with that id is pending (it never
	// existed, or was decided and forgotten).
	ErrUnknownRequest = errors.New("no such approval request")
	// ErrAlreadyDecided: the request was answered before (the first answer
	// wins); the error comes with the decision that stands.
	ErrAlreadyDecided = errors.New("approval request already decided")
)

// Broker holds the requests that wait for a person, for the approvals
// console and CLI to list and answer. The first answer to a request wins;
// a request that nobody answers before its deadline is decided
// OutcomeTimedOut. A Broker is safe for concurrent use.
type Broker struct {
	mu       sync.Mutex
	items    map[string]*item
	version  uint64
	changed  chan struct{} // closed and replaced at every change
	onDecide func(Ask, Decision)
	now      func() time.Time
	closed   bool
}

type item struct {
	ask      Ask
	done     chan struct{} // closed once decision is set and recorded
	decision *Decision
	timer    *time.Timer
}

// NewBroker returns an empty Broker. onDecide, if not nil, is called once
// per request with its final decision, before anyone waiting on the
// request is released (the Gate records the decision there).
func NewBroker(onDecide func(Ask, Decision)) *Broker {
	return &Broker{items: map[string]*item{}, changed: make(chan struct{}), onDecide: onDecide, now: time.Now}
}

// changedLocked wakes long-polls. b.mu must be held.
func (b *Broker) changedLocked() {
	b.version++
	close(b.changed)
	b.changed = make(chan struct{})
}

// Open registers a request that waits for a decision until a.Deadline.
// Opening an id twice is a no-op.
func (b *Broker) Open(a Ask) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.items[a.ID]; ok {
		return
	}
	it := &item{ask: a, done: make(chan struct{})}
	b.items[a.ID] = it
	if b.closed {
		go b.Decide(Decision{ID: a.ID, Outcome: OutcomeWithdrawn, By: "codeexec", Via: ViaServer, Note: "the server is shutting down"})
	} else {
		it.timer = time.AfterFunc(time.Until(a.Deadline), func() {
			_, _ = b.Decide(Decision{ID: a.ID, Outcome: OutcomeTimedOut, By: "codeexec", Via: ViaTimeout})
		})
	}
	b.changedLocked()
}

// Decide answers a pending request. The first answer wins: a later one
// returns the standing decision with ErrAlreadyDecided. An unknown id
// returns ErrUnknownRequest. d.At and d.CodeSHA256 are filled in.
func (b *Broker) Decide(d Decision) (Decision, error) {
	b.mu.Lock()
	it, ok := b.items[d.ID]
	if !ok {
		b.mu.Unlock()
		return Decision{}, ErrUnknownRequest
	}
	if it.decision != nil {
		cur := *it.decision
		b.mu.Unlock()
		<-it.done
		return cur, ErrAlreadyDecided
	}
	if d.At.IsZero() {
		d.At = b.now().UTC()
	}
	d.CodeSHA256 = it.ask.CodeSHA256
	it.decision = &d
	if it.timer != nil {
		it.timer.Stop()
	}
	// Keep the decision until a little after the deadline, for an
	// elicitation answer that arrives late to find it.
	forget := time.Until(it.ask.Deadline) + time.Minute
	time.AfterFunc(max(forget, time.Minute), func() {
		b.mu.Lock()
		if b.items[d.ID] == it {
			delete(b.items, d.ID)
		}
		b.mu.Unlock()
	})
	b.changedLocked()
	b.mu.Unlock()
	if b.onDecide != nil {
		b.onDecide(it.ask, d)
	}
	close(it.done)
	return d, nil
}

// Wait blocks until request id is decided, and returns the decision, or
// returns ctx's error when ctx ends first (the request stays pending:
// decide it OutcomeWithdrawn if its requester is gone).
func (b *Broker) Wait(ctx context.Context, id string) (Decision, error) {
	b.mu.Lock()
	it, ok := b.items[id]
	b.mu.Unlock()
	if !ok {
		return Decision{}, ErrUnknownRequest
	}
	select {
	case <-it.done:
		return *it.decision, nil
	case <-ctx.Done():
		return Decision{}, ctx.Err()
	}
}

// Pending lists the requests that wait for a decision, oldest first, and
// the version of the list (see Changes).
func (b *Broker) Pending() ([]Ask, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pendingLocked(), b.version
}

func (b *Broker) pendingLocked() []Ask {
	out := []Ask{}
	for _, it := range b.items {
		if it.decision == nil {
			out = append(out, it.ask)
		}
	}
	slices.SortFunc(out, func(x, y Ask) int { return x.Created.Compare(y.Created) })
	return out
}

// Changes waits until the list's version differs from since, or ctx ends,
// and returns the pending requests and the current version. It is how the
// console updates live.
func (b *Broker) Changes(ctx context.Context, since uint64) ([]Ask, uint64) {
	for {
		b.mu.Lock()
		if b.version != since {
			defer b.mu.Unlock()
			return b.pendingLocked(), b.version
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return b.Pending()
		}
	}
}

// WithdrawSession decides every pending request of an MCP session
// OutcomeWithdrawn (its client went away).
func (b *Broker) WithdrawSession(session string) {
	if session == "" {
		return
	}
	b.mu.Lock()
	var ids []string
	for id, it := range b.items {
		if it.decision == nil && it.ask.Requester.Session == session {
			ids = append(ids, id)
		}
	}
	b.mu.Unlock()
	for _, id := range ids {
		_, _ = b.Decide(Decision{ID: id, Outcome: OutcomeWithdrawn, By: "codeexec", Via: ViaClient, Note: "the client disconnected"})
	}
}

// Close withdraws every pending request; requests opened later are
// withdrawn at once. It is safe to call twice.
func (b *Broker) Close() {
	b.mu.Lock()
	b.closed = true
	var ids []string
	for id, it := range b.items {
		if it.decision == nil {
			ids = append(ids, id)
		}
	}
	b.mu.Unlock()
	for _, id := range ids {
		_, _ = b.Decide(Decision{ID: id, Outcome: OutcomeWithdrawn, By: "codeexec", Via: ViaServer, Note: "the server is shutting down"})
	}
}
