package progress_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/server/progress"
)

// recorder collects notifications.
type recorder struct {
	mu sync.Mutex
	ns []progress.Notification
	at []time.Time
}

func (r *recorder) send(n progress.Notification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ns = append(r.ns, n)
	r.at = append(r.at, time.Now())
}

func (r *recorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m []string
	for _, n := range r.ns {
		m = append(m, n.Message)
	}
	return m
}

func (r *recorder) all() []progress.Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]progress.Notification(nil), r.ns...)
}

func TestLinesInOrder(t *testing.T) {
	t.Parallel()
	var r recorder
	l := progress.New(r.send, progress.Options{Interval: time.Millisecond})
	// Chunks split lines anywhere; \r\n endings lose the \r; invalid
	// UTF-8 becomes U+FFFD; the last line needs no newline.
	for _, c := range []string{"one\ntw", "o\r\nthr", "ee\n", "\xff bad\n", "last"} {
		l.Observe(sandbox.Stdout, []byte(c))
	}
	l.Observe(sandbox.Stderr, []byte("oops\n"))
	l.Close()
	want := []string{"one", "two", "three", "\uFFFD bad", "stderr: oops", "last"}
	if got := r.messages(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("messages = %q, want %q", got, want)
	}
	for i, n := range r.all() {
		if n.Progress != float64(i+1) {
			t.Errorf("notification %d has progress %v, want %d (it must grow)", i, n.Progress, i+1)
		}
	}
	if sent, lost := l.Stats(); sent != len(want) || lost != 0 {
		t.Errorf("Stats = %d sent, %d lost; want %d, 0", sent, lost, len(want))
	}
}

func TestLongLineIsCut(t *testing.T) {
	t.Parallel()
	var r recorder
	l := progress.New(r.send, progress.Options{MaxLineBytes: 10})
	l.Observe(sandbox.Stdout, []byte("ééééééééééé\n")) // 22 bytes
	l.Close()
	got := r.messages()
	if len(got) != 1 || !strings.HasPrefix(got[0], "ééééé … (12 bytes cut)") {
		t.Errorf("messages = %q, want the line cut at a rune boundary, saying how much was cut", got)
	}
}

func TestEndlessLineDoesNotGrow(t *testing.T) {
	t.Parallel()
	var r recorder
	l := progress.New(r.send, progress.Options{MaxLineBytes: 10, Interval: time.Millisecond})
	for range 100 {
		l.Observe(sandbox.Stdout, []byte(strings.Repeat("x", 100))) // never a newline
	}
	l.Close()
	got := r.messages()
	if want := "xxxxxxxxxx … (9990 bytes cut)"; len(got) != 1 || got[0] != want {
		t.Errorf("messages = %q, want [%q]", got, want)
	}
}

func TestRateAndQueue(t *testing.T) {
	t.Parallel()
	var r recorder
	l := progress.New(r.send, progress.Options{Interval: 20 * time.Millisecond, Queue: 5})
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	l.Observe(sandbox.Stdout, []byte(b.String()))
	l.Close()
	got := r.messages()
	// Five lines fit in the queue, then one note for the 45 dropped.
	want := []string{"line 0", "line 1", "line 2", "line 3", "line 4",
		"… 45 lines not shown (output faster than progress notifications); the result has them all"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("messages = %q, want %q", got, want)
	}
	r.mu.Lock()
	for i := 1; i < len(r.at); i++ {
		if gap := r.at[i].Sub(r.at[i-1]); gap < 15*time.Millisecond {
			t.Errorf("notifications %d and %d are %v apart, want at least the 20ms interval", i-1, i, gap)
		}
	}
	r.mu.Unlock()
	if _, lost := l.Stats(); lost != 45 {
		t.Errorf("lost = %d, want 45", lost)
	}
}

func TestMaxLines(t *testing.T) {
	t.Parallel()
	var r recorder
	l := progress.New(r.send, progress.Options{Interval: time.Millisecond, MaxLines: 3})
	l.Observe(sandbox.Stdout, []byte("a\nb\nc\nd\ne\n"))
	l.Close()
	got := r.messages()
	if len(got) != 4 || strings.Join(got[:3], "") != "abc" || !strings.Contains(got[3], "more output than the 3 lines") {
		t.Errorf("messages = %q, want a, b, c and one note about the cap", got)
	}
}

func TestKeepAlive(t *testing.T) {
	t.Parallel()
	var r recorder
	l := progress.New(r.send, progress.Options{KeepAlive: 100 * time.Millisecond, Interval: time.Millisecond})
	l.Observe(sandbox.Stdout, []byte("start\n"))
	time.Sleep(550 * time.Millisecond)
	l.Observe(sandbox.Stdout, []byte("end\n"))
	l.Close()
	ns := r.all()
	if len(ns) < 5 || ns[0].Message != "start" || ns[len(ns)-1].Message != "end" {
		t.Fatalf("notifications = %+v, want start, keep-alives, end", ns)
	}
	alive := 0
	for _, n := range ns[1 : len(ns)-1] {
		if !n.KeepAlive || !strings.Contains(n.Message, "no new output") {
			t.Errorf("between the lines: %+v, want only keep-alives", n)
		}
		alive++
	}
	if alive < 3 || alive > 6 {
		t.Errorf("%d keep-alives in 550ms of silence at a 100ms interval, want about 5", alive)
	}
	r.mu.Lock()
	for i := 1; i < len(r.at); i++ {
		// Generous: the machine may be busy; the point is a bound.
		if gap := r.at[i].Sub(r.at[i-1]); gap > 350*time.Millisecond {
			t.Errorf("silence of %v between notifications, want at most about the 100ms keep-alive", gap)
		}
	}
	r.mu.Unlock()
}

func TestKeepAliveNeverAbove10s(t *testing.T) {
	t.Parallel()
	// An option above 10 s takes the default instead; observed indirectly:
	// Close returns at once and nothing is sent for a silent, short run.
	var r recorder
	l := progress.New(r.send, progress.Options{KeepAlive: time.Hour})
	l.Close()
	l.Close() // safe twice
	if got := r.messages(); len(got) != 0 {
		t.Errorf("messages = %q for a silent run closed at once, want none", got)
	}
}

func TestObserveAfterCloseIsIgnored(t *testing.T) {
	t.Parallel()
	var r recorder
	l := progress.New(r.send, progress.Options{})
	l.Close()
	l.Observe(sandbox.Stdout, []byte("late\n"))
	if got := r.messages(); len(got) != 0 {
		t.Errorf("messages = %q, want none after Close", got)
	}
}
