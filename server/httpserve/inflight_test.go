package httpserve

import (
	"context"
	"testing"
)

func TestInFlight(t *testing.T) {
	t.Parallel()
	var f InFlight
	if n := f.Wait(context.Background()); n != 0 {
		t.Fatalf("Wait with nothing in flight = %d, want 0", n)
	}
	end1, end2 := f.Begin(), f.Begin()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n := f.Wait(ctx); n != 2 {
		t.Errorf("Wait with an ended context = %d, want 2 in flight", n)
	}
	done := make(chan int)
	go func() { done <- f.Wait(context.Background()) }()
	end1()
	end1() // a second call counts nothing
	end2()
	if n := <-done; n != 0 {
		t.Errorf("Wait after both ended = %d, want 0", n)
	}
}
