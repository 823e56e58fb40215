// Package cancels keeps a client's cancellation of a request that the
// server has read but not yet started, and hands it over when the request
// starts.
//
// mcp-go registers a request's cancel function only once a worker starts
// to handle the request; on stdio a tools/call waits in a queue for a free
// worker first. A notifications/cancelled read in that time finds nothing
// to cancel and is dropped, and the request later runs as if it had never
// been cancelled. A Book closes that gap: the transport's reader tells it
// each request it passes on (Read) and each cancellation (Cancel); the
// request's start (Start) learns whether it was cancelled before it began.
package cancels

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// MaxPending bounds how many requests a Book holds between their reading
// and their start. A request that is never started (mcp-go answers some
// malformed ones before any hook runs) would otherwise be held for ever;
// over the bound the oldest are forgotten, which loses nothing but their
// early cancellation.
const MaxPending = 1 << 14

// Book holds the requests of one client connection that were read and have
// not started, and which of them were cancelled. Its zero value is not
// usable; make one with New.
type Book struct {
	mu      sync.Mutex
	pending map[string]*request
	seq     uint64
}

type request struct {
	seq       uint64
	cancelled bool
}

// New returns an empty Book.
func New() *Book { return &Book{pending: map[string]*request{}} }

// Read notes that the request id was read and passed on to be started.
func (b *Book) Read(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	b.pending[id] = &request{seq: b.seq}
	if len(b.pending) > MaxPending {
		b.forgetOldest()
	}
}

// Cancel notes a cancellation of the request id. It reports whether the
// Book keeps it, which it does for a request read and not yet started.
func (b *Book) Cancel(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.pending[id]
	if ok {
		r.cancelled = true
	}
	return ok
}

// Start notes that the request id has started (its cancel function is now
// registered, so any later cancellation reaches it directly) and forgets
// it. It reports whether the request was cancelled before it started.
func (b *Book) Start(id string) (cancelled bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.pending[id]
	delete(b.pending, id)
	return ok && r.cancelled
}

// Pending returns how many requests the Book holds.
func (b *Book) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// forgetOldest drops the older half of the pending requests.
func (b *Book) forgetOldest() {
	cut := b.seq - uint64(len(b.pending)/2)
	for id, r := range b.pending {
		if r.seq <= cut {
			delete(b.pending, id)
		}
	}
}

// Sessions holds a Book for each client session of a transport that
// serves many; its zero value is ready to use.
type Sessions struct{ m sync.Map }

// Book returns session's Book, made on first use.
func (s *Sessions) Book(session string) *Book {
	if b, ok := s.m.Load(session); ok {
		return b.(*Book)
	}
	b, _ := s.m.LoadOrStore(session, New())
	return b.(*Book)
}

// Forget drops session's Book, once the session has ended.
func (s *Sessions) Forget(session string) { s.m.Delete(session) }

type bookKey struct{}

// With returns ctx carrying b, for the request's start to find it.
func With(ctx context.Context, b *Book) context.Context {
	return context.WithValue(ctx, bookKey{}, b)
}

// From returns the Book that ctx carries, or nil.
func From(ctx context.Context) *Book {
	b, _ := ctx.Value(bookKey{}).(*Book)
	return b
}

// Key is the form of a JSON-RPC id that a Book is keyed by: the id as
// encoding/json decodes it into an any, printed with %v, as mcp-go keys
// its requests in flight.
func Key(id any) string { return fmt.Sprintf("%v", id) }

// Observe feeds b with one JSON-RPC message as read from the client: a
// tools/call with an id is Read, a notifications/cancelled is Cancelled.
// It ignores everything else, and any message it cannot decode.
func (b *Book) Observe(msg []byte) {
	var m struct {
		ID     any    `json:"id"`
		Method string `json:"method"`
		Params struct {
			RequestID any `json:"requestId"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return
	}
	switch {
	case m.Method == "tools/call" && m.ID != nil:
		b.Read(Key(m.ID))
	case m.Method == "notifications/cancelled" && m.ID == nil && m.Params.RequestID != nil:
		b.Cancel(Key(m.Params.RequestID))
	}
}

// Notification is the notifications/cancelled message for the request id
// (as decoded into an any), to hand to the server once the request starts.
func Notification(id any) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"method":  "notifications/cancelled",
		"params":  map[string]any{"requestId": id, "reason": "cancelled before it started"},
	})
	return b
}
