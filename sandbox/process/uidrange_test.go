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

// A root server with uid-range turned off runs everything as the range's
// first id; a server of the whole range on the same host must then never
// hand that id to a run of its own, nor sweep it as a leftover (seen by the
// flake hunt: such a sweep killed the first server's supervisors at start).
// Servers that share the id hold it together; one waits while a run of a
// range server holds it.
func TestSharedUIDIsNeverLeased(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rng := UIDRange{First: 4000000, Last: 4000001}
	a, err := shareUID(context.Background(), rng.First, dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := shareUID(context.Background(), rng.First, dir)
	if err != nil {
		t.Fatalf("a second server could not share the id: %v", err)
	}
	pool, err := newUIDPool(rng, dir)
	if err != nil {
		t.Fatal(err)
	}
	l := pool.tryAcquire()
	if l == nil || l.uid != rng.Last {
		t.Fatalf("the range server took %+v, want only %d", l, rng.Last)
	}
	if l2 := pool.tryAcquire(); l2 != nil {
		t.Fatalf("the range server took the shared id %d", l2.uid)
	}
	a.Close()
	if l2 := pool.tryAcquire(); l2 != nil {
		t.Fatalf("the range server took the id %d while a server still shares it", l2.uid)
	}
	b.Close()
	// acquire, not tryAcquire: a process the package's other tests fork
	// holds a copy of every descriptor, the lock's among them, until it
	// execs; acquire waits that out as a server does (the CI flake).
	waitCtx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	l2, err := pool.acquire(waitCtx)
	if err != nil || l2.uid != rng.First {
		t.Fatalf("once no server shares it, the range server took %+v (%v), want %d", l2, err, rng.First)
	}
	// While a run of the range server holds it, a server sharing it waits.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if f, err := shareUID(ctx, rng.First, dir); err == nil {
		f.Close()
		t.Fatal("the id was shared while a run of the range server held it")
	}
	l.release()
	l2.release()
}
