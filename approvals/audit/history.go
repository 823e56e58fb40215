package audit

import (
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// historySize is how many entries a Log keeps in memory for the console
// (about fifty requests with their decisions and runs).
const historySize = 150

// historyCodeBytes is how much of a request's code the history keeps; the
// audit log has all of it.
const historyCodeBytes = 4 << 10

// Activity is what the audit record says about one request: what was
// asked, every decision about it (normally one; a replayed or expired
// answer adds one), and how its run ended. A part is nil when it has not
// happened, or is older than what the Log keeps.
type Activity struct {
	ID        string  `json:"id"`
	Request   *Entry  `json:"request,omitempty"`
	Decisions []Entry `json:"decisions,omitempty"`
	Run       *Entry  `json:"run,omitempty"`
	// Latest is the time of its latest entry.
	Latest time.Time `json:"latest"`
}

// history is a ring of the latest audit entries. It is safe for concurrent use.
type history struct {
	mu      sync.Mutex
	entries []Entry
	next    int
	full    bool
}

func newHistory(n int) *history { return &history{entries: make([]Entry, n)} }

// add keeps entries, with their code cut to historyCodeBytes.
func (h *history) add(entries ...Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range entries {
		if len(e.Code) > historyCodeBytes {
			cut := historyCodeBytes
			for cut > 0 && !utf8.RuneStart(e.Code[cut]) {
				cut--
			}
			e.Code = e.Code[:cut] + "\n… (cut here; the audit log has all of it)"
		}
		h.entries[h.next] = e
		h.next = (h.next + 1) % len(h.entries)
		h.full = h.full || h.next == 0
	}
}

// recent groups the kept entries by request, latest activity first, at
// most n requests.
func (h *history) recent(n int) []Activity {
	h.mu.Lock()
	var kept []Entry
	if h.full {
		kept = append(kept, h.entries[h.next:]...)
	}
	kept = append(kept, h.entries[:h.next]...)
	h.mu.Unlock()

	byID := map[string]*Activity{}
	var order []*Activity
	for _, e := range kept {
		a := byID[e.ID]
		if a == nil {
			a = &Activity{ID: e.ID}
			byID[e.ID] = a
			order = append(order, a)
		}
		switch e.Event {
		case EventRequest:
			a.Request = &e
		case EventDecision:
			a.Decisions = append(a.Decisions, e)
		case EventRun:
			a.Run = &e
		}
		if e.Time.After(a.Latest) {
			a.Latest = e.Time
		}
	}
	slices.SortStableFunc(order, func(x, y *Activity) int { return y.Latest.Compare(x.Latest) })
	out := make([]Activity, 0, min(n, len(order)))
	for _, a := range order[:min(n, len(order))] {
		out = append(out, *a)
	}
	return out
}
