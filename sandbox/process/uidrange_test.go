package process

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestParseUIDRange(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in      string
		want    UIDRange
		wantErr bool
	}{
		{"200000-200063", UIDRange{200000, 200063}, false},
		{" 300000 - 300000 ", UIDRange{300000, 300000}, false},
		{"70000", UIDRange{70000, 70000}, false},
		{"0-10", UIDRange{}, true},
		{"65000-66000", UIDRange{}, true},
		{"10-5", UIDRange{}, true},
		{"a-b", UIDRange{}, true},
		{"1-4294967295", UIDRange{}, true},
	}
	for _, c := range cases {
		got, err := ParseUIDRange(c.in)
		if (err != nil) != c.wantErr || (!c.wantErr && got != c.want) {
			t.Errorf("ParseUIDRange(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.wantErr)
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
