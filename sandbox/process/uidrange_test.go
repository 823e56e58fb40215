package process

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestValidateUIDRange(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r  UIDRange
		ok bool
	}{
		{UIDRange{200000, 200063}, true},
		{UIDRange{70000, 70000}, true},
		{UIDRange{0, 10}, false},
		{UIDRange{65000, 66000}, false},
		{UIDRange{10, 5}, false},
		{UIDRange{1, 4294967295}, false},
	} {
		if err := c.r.Validate(); (err == nil) != c.ok {
			t.Errorf("%v.Validate() = %v, want ok=%v", c.r, err, c.ok)
		}
	}
}

func TestUIDPoolHandsOutEachIDOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Two pools over the same locks, as two servers would have.
	p1, err := newUIDPool(UIDRange{500000, 500001}, dir)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := newUIDPool(UIDRange{500000, 500001}, dir)
	ctx := context.Background()
	a, err := p1.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Held to the end: an unreferenced lease's file would be closed by its
	// finalizer at the next garbage collection, dropping the lock (the
	// -race run on a busy machine did collect it).
	defer a.release()
	b, err := p2.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.uid == b.uid {
		t.Fatalf("two runs got the same uid %d", a.uid)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p1.acquire(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire with every id taken = %v, want a deadline error", err)
	}
	b.release()
	if c, err := p1.acquire(ctx); err != nil || c.uid != b.uid {
		t.Fatalf("acquire after release = %v, %v; want uid %d", c, err, b.uid)
	}
}
