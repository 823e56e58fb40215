package progress_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
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

// gaps returns the time between each notification and the next.
func (r *recorder) gaps() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(r.at); i++ {
		g = append(g, r.at[i].Sub(r.at[i-1]))
	}
	return g
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

// TestRateAndQueue: lines wait their turn at the interval (measured on the
// bubble's clock, so a busy machine cannot blur it), and lines beyond the
// queue become one note.
func TestRateAndQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
		for i, gap := range r.gaps() {
			if gap != 20*time.Millisecond {
				t.Errorf("notifications %d and %d are %v apart, want the 20ms interval", i, i+1, gap)
			}
		}
		if _, lost := l.Stats(); lost != 45 {
			t.Errorf("lost = %d, want 45", lost)
		}
	})
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

// TestKeepAlive: a silent program gets a keep-alive every KeepAlive, on
// the bubble's clock: exactly five in 550ms of silence at 100ms, each
// 100ms after the notification before it.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		l := progress.New(r.send, progress.Options{KeepAlive: 100 * time.Millisecond, Interval: time.Millisecond})
		l.Observe(sandbox.Stdout, []byte("start\n"))
		time.Sleep(550 * time.Millisecond)
		l.Observe(sandbox.Stdout, []byte("end\n"))
		l.Close()
		ns := r.all()
		if len(ns) != 7 || ns[0].Message != "start" || ns[len(ns)-1].Message != "end" {
			t.Fatalf("notifications = %+v, want start, five keep-alives, end", ns)
		}
		for _, n := range ns[1 : len(ns)-1] {
			if !n.KeepAlive || !strings.Contains(n.Message, "no new output") {
				t.Errorf("between the lines: %+v, want only keep-alives", n)
			}
		}
		for i, gap := range r.gaps()[:5] {
			if gap != 100*time.Millisecond {
				t.Errorf("notifications %d and %d are %v apart, want the 100ms keep-alive", i, i+1, gap)
			}
		}
	})
}

// TestKeepAliveDefaultAndCap: no KeepAlive, or one above 10 s, takes the
// 5 s default; 10 s itself is kept. The keep-alive says how long the
// program has run.
func TestKeepAliveDefaultAndCap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		keepAlive time.Duration
		want      time.Duration
	}{
		{"none", 0, 5 * time.Second},
		{"an hour", time.Hour, 5 * time.Second},
		{"10s", 10 * time.Second, 10 * time.Second},
	} {
		synctest.Test(t, func(t *testing.T) {
			var r recorder
			l := progress.New(r.send, progress.Options{KeepAlive: c.keepAlive})
			time.Sleep(2*c.want + c.want/2)
			l.Close()
			l.Close() // safe twice
			ns := r.all()
			want := []string{
				fmt.Sprintf("running for %s, no new output", c.want),
				fmt.Sprintf("running for %s, no new output", 2*c.want),
			}
			if got := r.messages(); strings.Join(got, "|") != strings.Join(want, "|") || !ns[0].KeepAlive {
				t.Errorf("%s: notifications %+v in %s of silence, want %q", c.name, ns, 2*c.want+c.want/2, want)
			}
			if gaps := r.gaps(); len(gaps) != 1 || gaps[0] != c.want {
				t.Errorf("%s: keep-alives %v apart, want %s", c.name, gaps, c.want)
			}
		})
	}
}

func TestClosedAtOnceSendsNothing(t *testing.T) {
	t.Parallel()
	var r recorder
	l := progress.New(r.send, progress.Options{})
	l.Close()
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
