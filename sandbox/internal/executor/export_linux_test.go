//go:build linux

package executor

import (
	"sync"
	"testing"
)

// SkipEarlyRestores has the hand-overs during the test restore no thread
// of a run while its interpreter is still loading, as a walk misses a
// thread being created: the walk once it has loaded is then all there is.
// The channel is closed when a hand-over first skipped one.
func SkipEarlyRestores(t testing.TB) <-chan struct{} {
	skipped := make(chan struct{})
	var once sync.Once
	f := func(int) { once.Do(func() { close(skipped) }) }
	earlyRestoreForTest.Store(&f)
	t.Cleanup(func() { earlyRestoreForTest.Store(nil) })
	return skipped
}
