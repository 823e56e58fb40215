package sandbox

import (
	"bytes"
	"strings"
	"sync"
)

// Output captures a program's stdout and stderr up to a shared byte cap.
// When the cap is reached it keeps what fits, marks itself truncated and calls
// the OnLimit function once (runners use it to stop the run), then discards
// the rest. It is safe for concurrent use by the two streams.
type Output struct {
	mu        sync.Mutex
	limit     int64
	used      int64
	stdout    bytes.Buffer
	stderr    bytes.Buffer
	truncated bool
	onLimit   func()
	observe   ObserveFunc
}

// Stream names one of a program's output streams.
type Stream int

// The output streams.
const (
	Stdout Stream = iota + 1
	Stderr
)

// ObserveFunc sees a program's output while it runs: each chunk of a
// stream, in order, as it is kept (nothing past the output cap). It is
// called from the goroutine that copies the stream, with the Output's lock
// released, and must not block for long nor keep p after it returns.
type ObserveFunc func(s Stream, p []byte)

// NewOutput returns an Output that keeps at most limit bytes in total
// (limit <= 0 means no cap) and calls onLimit (which may be nil) the first
// time a write goes past the cap.
func NewOutput(limit int64, onLimit func()) *Output {
	return &Output{limit: limit, onLimit: onLimit}
}

// Observe sets f (which may be nil) to see the output as it is kept. Call
// it before the streams are written (see Request.Observe); it returns o.
func (o *Output) Observe(f ObserveFunc) *Output {
	o.mu.Lock()
	o.observe = f
	o.mu.Unlock()
	return o
}

// Stdout returns the writer for the program's standard output.
func (o *Output) Stdout() *StreamWriter { return &StreamWriter{o: o, buf: &o.stdout, s: Stdout} }

// Stderr returns the writer for the program's standard error.
func (o *Output) Stderr() *StreamWriter { return &StreamWriter{o: o, buf: &o.stderr, s: Stderr} }

// StreamWriter is one stream of an Output. Its Write never fails, so that a
// copying goroutine keeps draining the program's pipe after the cap (the
// program is being stopped at that point anyway).
type StreamWriter struct {
	o   *Output
	buf *bytes.Buffer
	s   Stream
}

// Write implements io.Writer.
func (w *StreamWriter) Write(p []byte) (int, error) {
	o := w.o
	o.mu.Lock()
	n := int64(len(p))
	keep := n
	fire := false
	if o.limit > 0 && o.used+n > o.limit {
		keep = o.limit - o.used
		if !o.truncated {
			o.truncated = true
			fire = o.onLimit != nil
		}
	}
	if keep > 0 {
		w.buf.Write(p[:keep])
		o.used += keep
	}
	observe := o.observe
	o.mu.Unlock()
	if observe != nil && keep > 0 {
		observe(w.s, p[:keep])
	}
	if fire {
		o.onLimit()
	}
	return len(p), nil
}

// Truncated reports whether the cap was reached.
func (o *Output) Truncated() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.truncated
}

// Fill copies the captured output into r as valid UTF-8 and sets r.Truncated.
func (o *Output) Fill(r *Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r.Stdout = strings.ToValidUTF8(o.stdout.String(), "\uFFFD")
	r.Stderr = strings.ToValidUTF8(o.stderr.String(), "\uFFFD")
	r.Truncated = o.truncated
}
