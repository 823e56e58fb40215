package sessions

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// The drivers and their protocol.
//
// A python or javascript session keeps one live interpreter running a small
// driver program (drivers/python.py, drivers/javascript.js). The driver
// reads calls from a control input and answers on a control output; these
// are not the program's stdin and stdout, which the driver gives each call
// afresh, so that every call's output is its own.
//
// A call, server to driver: the line "<code bytes> <stdin bytes>\n", then
// the code, then the call's stdin.
//
// The answers, driver to server, are frames: one kind byte, the payload
// length as 4 big-endian bytes, and the payload. A frame is written with one
// write of at most PIPE_BUF (4096) bytes, so that a driver killed while it
// writes never leaves half a frame in a pipe. The kinds:
//
//	R  ready: the interpreter is loaded (payload: its name and version)
//	O  output the call wrote to its stdout
//	E  output the call wrote to its stderr
//	X  the call ended (payload: its exit status, in decimal)
//	F  the driver failed and exits (payload: why)
//
// The driver runs the code in a namespace that persists between calls:
// python's __main__ globals, javascript's global scope (see the drivers for
// the details). An exception is printed as a traceback on the call's stderr
// and ends the call with status 1; the state stays. The server treats the
// driver as untrusted: it is the same process as the sandboxed code, so a
// frame is checked, never believed beyond its own session.

//go:embed drivers/python.py
var pythonDriverSource string

// pythonDriver is the python driver after the function that puts the
// session's packages on sys.path.
var pythonDriver = sandbox.PythonUsePackages + pythonDriverSource

//go:embed drivers/javascript.js
var javascriptDriver string

// DriverArgs returns the interpreter arguments that run the session driver
// of lang (python or javascript) with the control input in and output out
// (each a path or "fd:N"), placed after the language's own arguments, and
// false for a language without a driver (bash sessions run a fresh bash per
// call).
func DriverArgs(lang, in, out string) ([]string, bool) {
	switch lang {
	case "python":
		return []string{"-c", pythonDriver, in, out}, true
	case "javascript":
		return []string{"-e", javascriptDriver, in, out}, true
	}
	return nil, false
}

// Interpreted reports whether sessions of lang keep a live interpreter
// (python, javascript) rather than only files and the working directory.
func Interpreted(lang string) bool {
	_, ok := DriverArgs(lang, "", "")
	return ok
}

// maxFrame is the largest payload a driver may send in one frame.
const maxFrame = 4096 - 5

// frame kinds.
const (
	kindReady  = 'R'
	kindStdout = 'O'
	kindStderr = 'E'
	kindExit   = 'X'
	kindFail   = 'F'
)

// ErrDriverDied says that the interpreter of a session ended, or broke the
// protocol: its state is gone.
var ErrDriverDied = errors.New("the session's interpreter ended")

// Conn speaks the driver protocol over a control channel. Exec sends one
// call at a time; a reader goroutine takes the frames as they come and hands
// them to the call in flight (frames between calls, from work the previous
// call left running, are dropped).
//
// A Conn is broken once the driver ended or misbehaved, a call timed out, or
// the output cap was reached: the caller must then kill the interpreter
// (its state is lost) and start another with a new Conn. Close closes both
// ends of the channel.
type Conn struct {
	w  io.WriteCloser
	rc io.Closer

	mu    sync.Mutex
	sink  *call
	ready string

	readyC chan struct{}
	doneC  chan struct{} // closed when the reader ends
	err    error         // why the reader ended; valid once doneC is closed
}

// call is the state of the call in flight.
type call struct {
	out   *sandbox.Output
	exitC chan int
}

// NewConn starts reading frames from r; w carries the calls. Both are closed
// by Close.
func NewConn(w io.WriteCloser, r io.ReadCloser) *Conn {
	c := &Conn{w: w, rc: r, readyC: make(chan struct{}), doneC: make(chan struct{})}
	go c.read(r)
	return c
}

func (c *Conn) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<16)
	var hdr [5]byte
	buf := make([]byte, maxFrame)
	c.err = func() error {
		for {
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					return ErrDriverDied
				}
				return fmt.Errorf("%w: %v", ErrDriverDied, err)
			}
			n := binary.BigEndian.Uint32(hdr[1:])
			if n > maxFrame {
				return fmt.Errorf("%w: it sent a frame of %d bytes (at most %d)", ErrDriverDied, n, maxFrame)
			}
			p := buf[:n]
			if _, err := io.ReadFull(br, p); err != nil {
				return ErrDriverDied
			}
			if err := c.dispatch(hdr[0], p); err != nil {
				return err
			}
		}
	}()
	close(c.doneC)
}

// dispatch hands one frame to its destination.
func (c *Conn) dispatch(kind byte, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch kind {
	case kindReady:
		if c.ready != "" {
			return fmt.Errorf("%w: it announced itself twice", ErrDriverDied)
		}
		c.ready = string(p)
		if c.ready == "" {
			c.ready = "ready"
		}
		close(c.readyC)
	case kindStdout, kindStderr:
		if c.sink != nil {
			if kind == kindStdout {
				_, _ = c.sink.out.Stdout().Write(p)
			} else {
				_, _ = c.sink.out.Stderr().Write(p)
			}
		}
	case kindExit:
		code, err := strconv.Atoi(string(p))
		if err != nil || code < 0 || code > 255 {
			return fmt.Errorf("%w: it sent an unreadable exit status", ErrDriverDied)
		}
		if c.sink != nil {
			c.sink.exitC <- code
			c.sink = nil
		}
	case kindFail:
		return fmt.Errorf("%w: %s", ErrDriverDied, truncate(string(p), 200))
	default:
		return fmt.Errorf("%w: it sent a frame of unknown kind %q", ErrDriverDied, kind)
	}
	return nil
}

// WaitReady waits for the driver's ready frame and returns what it said
// (its interpreter and version). It fails when the driver ends first, or
// when ctx ends.
func (c *Conn) WaitReady(ctx context.Context) (string, error) {
	select {
	case <-c.readyC:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.ready, nil
	case <-c.doneC:
		return "", c.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Done is closed when the driver's output has ended (it exited, or broke
// the protocol).
func (c *Conn) Done() <-chan struct{} { return c.doneC }

// Outcome says how a call on a Conn ended.
type Outcome int

// The outcomes of Exec. Anything but Completed leaves the Conn broken.
const (
	// Completed: the code ran and the driver reported its exit status.
	Completed Outcome = iota
	// TimedOut: the call's timeout passed first.
	TimedOut
	// Overflowed: the call's output went past the cap.
	Overflowed
	// Cancelled: ctx ended first.
	Cancelled
	// Died: the driver ended or broke the protocol during the call.
	Died
)

// Exec runs one call: it sends code and stdin and waits for the exit frame,
// collecting the call's output within lim.OutputBytes, for at most
// lim.Timeout (0: no limit). The Result has the exit status, the output and
// the duration; TimedOut and Truncated are set for those outcomes. Exec
// does not kill anything: on any outcome but Completed the caller kills the
// interpreter. Calls must not overlap.
func (c *Conn) Exec(ctx context.Context, code, stdin string, lim sandbox.Limits) (*sandbox.Result, Outcome) {
	overflow := make(chan struct{})
	var once sync.Once
	out := sandbox.NewOutput(lim.OutputBytes, func() { once.Do(func() { close(overflow) }) })
	cl := &call{out: out, exitC: make(chan int, 1)}
	c.mu.Lock()
	c.sink = cl
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.sink == cl {
			c.sink = nil
		}
		c.mu.Unlock()
	}()

	res := &sandbox.Result{ExitCode: -1}
	start := time.Now()
	wrote := make(chan error, 1)
	go func() {
		msg := make([]byte, 0, 32+len(code)+len(stdin))
		msg = fmt.Appendf(msg, "%d %d\n", len(code), len(stdin))
		msg = append(append(msg, code...), stdin...)
		_, err := c.w.Write(msg)
		wrote <- err
	}()
	var timer <-chan time.Time
	if lim.Timeout > 0 {
		t := time.NewTimer(lim.Timeout)
		defer t.Stop()
		timer = t.C
	}
	outcome := Completed
	for done := false; !done; {
		select {
		case err := <-wrote:
			wrote = nil
			if err != nil {
				outcome, done = Died, true
			}
		case code := <-cl.exitC:
			res.ExitCode, done = code, true
		case <-c.doneC:
			// An exit frame read just before the end still counts.
			select {
			case code := <-cl.exitC:
				res.ExitCode = code
			default:
				outcome = Died
			}
			done = true
		case <-timer:
			outcome, done = TimedOut, true
			res.TimedOut = true
		case <-overflow:
			outcome, done = Overflowed, true
		case <-ctx.Done():
			outcome, done = Cancelled, true
		}
	}
	res.Duration = time.Since(start)
	c.mu.Lock()
	if c.sink == cl {
		c.sink = nil
	}
	c.mu.Unlock()
	out.Fill(res)
	return res, outcome
}

// Err is why the reader ended; nil while it runs.
func (c *Conn) Err() error {
	select {
	case <-c.doneC:
		return c.err
	default:
		return nil
	}
}

// Close closes both ends of the control channel. The reader ends once the
// read end is closed (or the driver is gone).
func (c *Conn) Close() error {
	return errors.Join(c.w.Close(), c.rc.Close())
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
