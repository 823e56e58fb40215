// Package progress turns a running program's output into MCP progress
// notifications: one notification per line (its message is the line), at
// a bounded rate and up to a cap of lines, and a keep-alive whenever the
// program has been silent for a while, so that a client (and any proxy in
// between) sees that the run is alive.
//
// A Lines is fed with output chunks (it is a sandbox.ObserveFunc) and calls
// a Send function from a goroutine of its own, never from the writer's.
package progress

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/codeexec/codeexec/sandbox"
)

// Notification is one progress notification: Progress grows with every
// notification (as MCP requires), Message is an output line or a keep-alive.
type Notification struct {
	Progress float64
	Message  string
	// KeepAlive marks a notification sent because the program was silent.
	KeepAlive bool
}

// Options bound the notifications. Zero fields take the defaults.
type Options struct {
	// Interval is the least time between two line notifications (default
	// 50ms: at most 20 lines a second).
	Interval time.Duration
	// Queue is how many lines may wait to be sent (default 200); lines
	// beyond it are dropped and a note says how many.
	Queue int
	// MaxLines caps the lines sent per run (default 1000); after the cap a
	// single note says that the rest is in the result.
	MaxLines int
	// MaxLineBytes cuts longer lines (default 1000 bytes), marking the cut.
	MaxLineBytes int
	// KeepAlive is the longest silence between notifications (default 5s,
	// at most 10s).
	KeepAlive time.Duration
	// StderrPrefix is put before lines of standard error (default "stderr: ").
	StderrPrefix string
}

func (o *Options) defaults() {
	if o.Interval <= 0 {
		o.Interval = 50 * time.Millisecond
	}
	if o.Queue <= 0 {
		o.Queue = 200
	}
	if o.MaxLines <= 0 {
		o.MaxLines = 1000
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = 1000
	}
	if o.KeepAlive <= 0 || o.KeepAlive > 10*time.Second {
		o.KeepAlive = 5 * time.Second
	}
	if o.StderrPrefix == "" {
		o.StderrPrefix = "stderr: "
	}
}

// Lines splits output into lines and sends them as notifications. Create
// it with New, feed it with Observe, and Close it when the run ends.
type Lines struct {
	opts  Options
	send  func(Notification)
	start time.Time

	mu       sync.Mutex
	partial  [3][]byte // the line being written, by sandbox.Stream
	cut      [3]int    // bytes of that line not kept
	queue    []item
	accepted int
	closed   bool
	wake     chan struct{}
	done     chan struct{}

	// Counters, read by Stats; overCap counts the lines past MaxLines.
	sent, lost, overCap int
}

// New starts a Lines that calls send for each notification, from its own
// goroutine, one call at a time. send should not block for long: lines
// that arrive meanwhile wait in the queue.
func New(send func(Notification), opts Options) *Lines {
	opts.defaults()
	l := &Lines{opts: opts, send: send, start: time.Now(), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go l.loop()
	return l
}

// Observe takes a chunk of a stream; it is a sandbox.ObserveFunc. It never
// blocks on send.
func (l *Lines) Observe(s sandbox.Stream, p []byte) {
	if s != sandbox.Stdout && s != sandbox.Stderr {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		// Keep at most MaxLineBytes (and a rune's tail) of a line; count
		// the rest, so that an endless line costs no memory.
		room := l.opts.MaxLineBytes + utf8.UTFMax - len(l.partial[s])
		if room < 0 {
			room = 0
		}
		if len(chunk) > room {
			l.cut[s] += len(chunk) - room
			chunk = chunk[:room]
		}
		l.partial[s] = append(l.partial[s], chunk...)
		if i < 0 {
			break
		}
		l.pushLocked(s, l.partial[s], l.cut[s])
		l.partial[s], l.cut[s] = l.partial[s][:0], 0
		p = p[i+1:]
	}
	l.signal()
}

// item is a queued line, or a note of how many lines were dropped at
// that point because the queue was full.
type item struct {
	text    string
	dropped int
}

// pushLocked queues one line.
func (l *Lines) pushLocked(s sandbox.Stream, line []byte, cut int) {
	if l.accepted >= l.opts.MaxLines {
		l.lost++
		l.overCap++
		return
	}
	l.accepted++
	if len(l.queue) >= l.opts.Queue {
		l.lost++
		if last := len(l.queue) - 1; l.queue[last].dropped > 0 {
			l.queue[last].dropped++
		} else {
			l.queue = append(l.queue, item{dropped: 1})
		}
		return
	}
	l.queue = append(l.queue, item{text: l.format(s, line, cut)})
}

// format makes a line's message; cut more bytes of it were not kept.
func (l *Lines) format(s sandbox.Stream, line []byte, cut int) string {
	if cut == 0 {
		line = bytes.TrimSuffix(line, []byte("\r"))
	}
	text := string(line)
	if len(text) > l.opts.MaxLineBytes {
		keep := l.opts.MaxLineBytes
		for keep > 0 && !utf8.RuneStart(text[keep]) {
			keep--
		}
		cut += len(text) - keep
		text = text[:keep]
	}
	if cut > 0 {
		text += fmt.Sprintf(" … (%d bytes cut)", cut)
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	if s == sandbox.Stderr {
		text = l.opts.StderrPrefix + text
	}
	return text
}

func (l *Lines) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Close sends what is left (a last line without a newline included), stops
// the keep-alives and returns once the last notification has been sent.
// It is safe to call more than once.
func (l *Lines) Close() {
	l.mu.Lock()
	if !l.closed {
		for _, s := range []sandbox.Stream{sandbox.Stdout, sandbox.Stderr} {
			if len(l.partial[s]) > 0 {
				l.pushLocked(s, l.partial[s], l.cut[s])
				l.partial[s], l.cut[s] = nil, 0
			}
		}
		l.closed = true
		l.signal()
	}
	l.mu.Unlock()
	<-l.done
}

// Stats returns how many notifications were sent and how many lines were
// not sent (dropped over the rate or left over the cap).
func (l *Lines) Stats() (sent, lost int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.lost
}

func (l *Lines) loop() {
	defer close(l.done)
	var (
		n        float64
		lastSent = time.Now()
		capNoted bool
	)
	emit := func(msg string, keepAlive bool) {
		n++
		l.send(Notification{Progress: n, Message: msg, KeepAlive: keepAlive})
		lastSent = time.Now()
		l.mu.Lock()
		l.sent++
		l.mu.Unlock()
	}
	keep := time.NewTimer(l.opts.KeepAlive)
	defer keep.Stop()
	for {
		l.mu.Lock()
		var (
			next item
			have bool
		)
		if len(l.queue) > 0 {
			next, have = l.queue[0], true
			l.queue = l.queue[1:]
		}
		overCap := l.overCap > 0 && !capNoted
		closed := l.closed
		l.mu.Unlock()

		if have {
			if wait := l.opts.Interval - time.Since(lastSent); wait > 0 && n > 0 {
				time.Sleep(wait)
			}
			if next.dropped > 0 {
				emit(fmt.Sprintf("… %d lines not shown (output faster than progress notifications); the result has them all", next.dropped), false)
			} else {
				emit(next.text, false)
			}
			continue
		}
		if overCap {
			capNoted = true
			emit(fmt.Sprintf("… more output than the %d lines shown as progress; the result has it (up to the output cap)", l.opts.MaxLines), false)
			continue
		}
		if closed {
			return
		}
		if !keep.Stop() {
			select {
			case <-keep.C:
			default:
			}
		}
		keep.Reset(l.opts.KeepAlive - time.Since(lastSent))
		select {
		case <-l.wake:
		case <-keep.C:
			if time.Since(lastSent) >= l.opts.KeepAlive-time.Millisecond {
				emit(fmt.Sprintf("running for %s, no new output", time.Since(l.start).Round(time.Second)), true)
			}
		}
	}
}
