package sandboxtest

import (
	"slices"
	"sync"
)

// Served records what served the runs of a test's Runner (a container, a
// pod: its id or name) and whether it was warm, in the order the runs took
// them. A mode's Runner reports each run to Add through a test hook.
type Served struct {
	mu   sync.Mutex
	ids  []string
	warm []bool
}

// Add records that id served a run, warm or not.
func (s *Served) Add(id string, warm bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, id)
	s.warm = append(s.warm, warm)
}

// List returns what served each run so far, and whether it was warm.
func (s *Served) List() ([]string, []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids), slices.Clone(s.warm)
}

// ServedBy maps each test Runner of a mode to its record.
type ServedBy[R comparable] struct {
	mu sync.Mutex
	m  map[R]*Served
}

// New makes r's record.
func (b *ServedBy[R]) New(r R) *Served {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[R]*Served{}
	}
	s := &Served{}
	b.m[r] = s
	return s
}

// Of returns r's record (nil if New was not called for r).
func (b *ServedBy[R]) Of(r R) *Served {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[r]
}
