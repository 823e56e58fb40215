package artifacts_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

func art(p string, size int) artifacts.Artifact {
	return artifacts.Artifact{Path: p, Size: int64(size), Data: make([]byte, size), MIMEType: "application/octet-stream"}
}

func TestURIRoundTrip(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"chart.png", "out/deep/x.csv", "données/été 2024.csv", "a%b#c?d.txt", ".hidden"} {
		uri := artifacts.URI("0123abcd", p)
		if !strings.HasPrefix(uri, "codeexec://runs/0123abcd/") || strings.ContainsAny(uri, " #?") {
			t.Errorf("URI(%q) = %q, want it under codeexec://runs/0123abcd/ and escaped", p, uri)
		}
		id, got, err := artifacts.ParseURI(uri)
		if err != nil || id != "0123abcd" || got != p {
			t.Errorf("ParseURI(URI(%q)) = %q %q %v", p, id, got, err)
		}
	}
	if got := artifacts.URI("r1", "out/a b.png"); got != "codeexec://runs/r1/out/a%20b.png" {
		t.Errorf("URI = %q", got)
	}
}

func TestParseURIRejects(t *testing.T) {
	t.Parallel()
	for _, uri := range []string{
		"",
		"file:///etc/passwd",
		"codeexec://runs/",
		"codeexec://runs/r1",
		"codeexec://runs/r1/",
		"codeexec://other/r1/a.txt",
		"codeexec://runs/r1/../a.txt",
		"codeexec://runs/r1/%2e%2e/a.txt",
		"codeexec://runs/r1/a/%2e%2e/%2e%2e/b",
		"codeexec://runs/r1//a.txt",
		"codeexec://runs/r1/a.txt?x=1",
		"codeexec://runs/r1/a%zz",
		"codeexec://runs/r1/a%00b",
	} {
		if id, p, err := artifacts.ParseURI(uri); !errors.Is(err, artifacts.ErrBadURI) {
			t.Errorf("ParseURI(%q) = %q %q %v, want ErrBadURI", uri, id, p, err)
		}
	}
}

func TestRunIDsAreUnguessable(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for range 1000 {
		id := artifacts.NewRunID()
		if len(id) != 32 || seen[id] {
			t.Fatalf("run id %q: want 32 hex digits, never twice", id)
		}
		seen[id] = true
	}
}

// clock is a fake time source for a Store.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestStoreServesByURIToItsOwner(t *testing.T) {
	t.Parallel()
	s := artifacts.NewStore(time.Minute, 1<<20)
	arts := []artifacts.Artifact{art("big.bin", 1000), art("out/small.txt", 10)}
	if n := s.Put("run1", "alice", arts); n != 2 {
		t.Fatalf("Put kept %d, want 2", n)
	}
	if arts[0].URI != "codeexec://runs/run1/big.bin" || arts[1].URI != "codeexec://runs/run1/out/small.txt" {
		t.Errorf("URIs %q %q", arts[0].URI, arts[1].URI)
	}
	got, err := s.Get(arts[0].URI, "alice")
	if err != nil || got.Path != "big.bin" || len(got.Data) != 1000 || got.URI != arts[0].URI {
		t.Errorf("Get = %+v, %v", got.Path, err)
	}
	if _, err := s.Get(arts[0].URI, "mallory"); !errors.Is(err, artifacts.ErrNotFound) {
		t.Errorf("another owner's Get: %v, want ErrNotFound", err)
	}
	if _, err := s.Get("codeexec://runs/run1/nope.txt", "alice"); !errors.Is(err, artifacts.ErrNotFound) {
		t.Errorf("Get of a file the run did not make: %v", err)
	}
	if _, err := s.Get("codeexec://runs/run2/big.bin", "alice"); !errors.Is(err, artifacts.ErrNotFound) || !strings.Contains(err.Error(), "run the code again") {
		t.Errorf("Get of an unknown run: %v", err)
	}
	if _, err := s.Get("https://example.com/x", "alice"); !errors.Is(err, artifacts.ErrBadURI) {
		t.Errorf("Get of a foreign URI: %v", err)
	}
	if s.Used() != 1010 {
		t.Errorf("Used = %d, want 1010", s.Used())
	}
	// Putting the same path again replaces it.
	s.Put("run1", "alice", []artifacts.Artifact{art("big.bin", 10)})
	if s.Used() != 20 {
		t.Errorf("after replacing big.bin, Used = %d, want 20", s.Used())
	}
}

func TestStoreExpiresRuns(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Unix(1000, 0)}
	s := artifacts.NewStoreWithClock(time.Minute, 1<<20, c.Now)
	a := []artifacts.Artifact{art("a", 10)}
	s.Put("old", "o", a)
	c.Advance(30 * time.Second)
	b := []artifacts.Artifact{art("b", 10)}
	s.Put("new", "o", b)
	c.Advance(29 * time.Second)
	if _, err := s.Get(a[0].URI, "o"); err != nil {
		t.Errorf("59 s after: %v", err)
	}
	c.Advance(time.Second)
	if _, err := s.Get(a[0].URI, "o"); !errors.Is(err, artifacts.ErrNotFound) {
		t.Errorf("60 s after: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(b[0].URI, "o"); err != nil {
		t.Errorf("the newer run expired too early: %v", err)
	}
	if s.Used() != 10 {
		t.Errorf("Used = %d after expiry, want 10", s.Used())
	}
	c.Advance(time.Hour)
	if _, err := s.Get(b[0].URI, "o"); !errors.Is(err, artifacts.ErrNotFound) || s.Used() != 0 {
		t.Errorf("an hour later: %v, Used %d", err, s.Used())
	}
}

func TestStoreEvictsOldestRunsWhenFull(t *testing.T) {
	t.Parallel()
	s := artifacts.NewStore(time.Hour, 100)
	runs := make([][]artifacts.Artifact, 4)
	for i := range runs {
		runs[i] = []artifacts.Artifact{art("f", 40)}
		if n := s.Put(fmt.Sprint("r", i), "o", runs[i]); n != 1 {
			t.Fatalf("run %d: kept %d", i, n)
		}
	}
	for i, want := range []bool{false, false, true, true} {
		_, err := s.Get(runs[i][0].URI, "o")
		if (err == nil) != want {
			t.Errorf("run %d kept = %v, want %v", i, err == nil, want)
		}
	}
	if s.Used() != 80 {
		t.Errorf("Used = %d, want 80", s.Used())
	}
	// A run larger than the whole store keeps what fits, in order.
	big := []artifacts.Artifact{art("a", 60), art("b", 60), art("c", 30), art("huge", 101)}
	if n := s.Put("big", "o", big); n != 2 {
		t.Errorf("kept %d of the big run, want 2 (a and c)", n)
	}
	if big[0].URI == "" || big[1].URI != "" || big[2].URI == "" || big[3].URI != "" {
		t.Errorf("URIs of the big run: %q %q %q %q", big[0].URI, big[1].URI, big[2].URI, big[3].URI)
	}
	if s.Used() != 90 {
		t.Errorf("Used = %d, want 90", s.Used())
	}
}

func TestStoreIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	s := artifacts.NewStore(time.Hour, 1000)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				a := []artifacts.Artifact{art("f", 30)}
				id := fmt.Sprintf("g%d-%d", g, i)
				s.Put(id, "o", a)
				_, _ = s.Get(a[0].URI, "o")
			}
		}()
	}
	wg.Wait()
	if u := s.Used(); u > 1000 || u < 30 {
		t.Errorf("Used = %d, want within (30, 1000]", u)
	}
}
