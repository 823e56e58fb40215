package artifacts

import "time"

// NewStoreWithClock is NewStore with a fake clock, for tests.
func NewStoreWithClock(ttl time.Duration, maxBytes int64, now func() time.Time) *Store {
	s := NewStore(ttl, maxBytes)
	s.now = now
	return s
}
