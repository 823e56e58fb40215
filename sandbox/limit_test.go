package sandbox_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// slotRunner is a fake whose runs report that they started (with their
// code) and wait for their own release.
type slotRunner struct {
	started chan string
	release map[string]chan struct{}
}

func newSlotRunner(codes ...string) (*slotRunner, *sandboxtest.Fake) {
	r := &slotRunner{started: make(chan string, 64), release: map[string]chan struct{}{}}
	for _, c := range codes {
		r.release[c] = make(chan struct{})
	}
	return r, &sandboxtest.Fake{RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		r.started <- req.Code
		select {
		case <-r.release[req.Code]:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &sandbox.Result{}, nil
	}}
}

// TestLimitHandsSlotsOutInTurn: a free slot goes to the next client that
// waits, not to the client with the longest queue; background runs leave a
// slot to the others; a run given up while waiting takes no slot. In a
// bubble: "n runs wait" is checked once every goroutine is blocked.
func TestLimitHandsSlotsOutInTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testLimitHandsSlotsOutInTurn)
}

func testLimitHandsSlotsOutInTurn(t *testing.T) {
	codes := []string{"a-bg-1", "a-bg-2", "a-bg-3", "a-1", "a-2", "b-1", "c-gone"}
	r, fake := newSlotRunner(codes...)
	l := sandbox.Limit(fake, 2)
	run := func(ctx context.Context, client, code string, background bool) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := l.Run(sandbox.WithCaller(ctx, sandbox.Caller{Client: client, Background: background}), sandbox.Request{Code: code})
			done <- err
		}()
		return done
	}
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-r.started:
			if got != want {
				t.Fatalf("started %s, want %s", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not start", want)
		}
	}
	waiting := func(n int) {
		t.Helper()
		synctest.Wait()
		if l.Waiting() != n {
			t.Fatalf("%d runs wait, want %d", l.Waiting(), n)
		}
	}
	// A's background runs take one of the two slots, not both.
	bg := []chan error{run(context.Background(), "a", "a-bg-1", true)}
	expect("a-bg-1")
	bg = append(bg, run(context.Background(), "a", "a-bg-2", true))
	waiting(1)
	bg = append(bg, run(context.Background(), "a", "a-bg-3", true))
	waiting(2)
	if l.InFlight() != 1 {
		t.Fatalf("%d runs hold a slot, want 1: background runs must leave one", l.InFlight())
	}
	// A's calls queue up, then B's and C's; C gives up.
	a1 := run(context.Background(), "a", "a-1", false)
	expect("a-1") // the free slot
	a2 := run(context.Background(), "a", "a-2", false)
	waiting(3)
	b1 := run(context.Background(), "b", "b-1", false)
	waiting(4)
	ctx, cancel := context.WithCancel(context.Background())
	c := run(ctx, "c", "c-gone", false)
	waiting(5)
	cancel()
	if err := <-c; !errors.Is(err, context.Canceled) {
		t.Fatalf("a run given up while waiting: %v", err)
	}
	waiting(4)
	// a-1 ends: B's turn comes before A's second call (A had the last turn).
	close(r.release["a-1"])
	<-a1
	expect("b-1")
	close(r.release["b-1"])
	<-b1
	expect("a-2")
	close(r.release["a-2"])
	<-a2
	// A background run ends: the next one takes its slot.
	close(r.release["a-bg-1"])
	expect("a-bg-2")
	close(r.release["a-bg-2"])
	expect("a-bg-3")
	close(r.release["a-bg-3"])
	for _, d := range bg {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Fatalf("in flight %d, waiting %d after everything ended", l.InFlight(), l.Waiting())
	}
}
