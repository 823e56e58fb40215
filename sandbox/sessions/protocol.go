package sessions

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// The session supervisor and its protocol.
//
// Every session, in every mode and language, runs one small python program,
// the supervisor (drivers/supervisor.py), that never runs the session's
// code. The server talks only to it, over a control channel of its own: the
// attached stdin and stdout of the session's container in docker mode, where
// it is PID 1; two FIFOs in process mode and mode none, where it is the
// session's one long run; in kubernetes mode, where it is the session pod's
// PID 1, each connection that a call's exec into the pod makes to an abstract
// unix socket that the supervisor binds before anything of the session runs
// and holds for the session's life (one connection at a time, served only
// between calls and only for a process started from outside the pod; see
// the supervisor's "Listening", and sandbox/kube). It makes itself
// non-dumpable first, so that no process of the session can read its memory
// or descriptors or trace it (the channel is out of their reach), ignores
// every signal it can, and is a child subreaper (or the container's init),
// so that every process of the session is its descendant. It starts the session's interpreter: for python a fork
// of itself that runs the python driver (drivers/python.py), for javascript
// node with the javascript driver (drivers/javascript.js); a bash session
// has none, and each call is a fresh bash. An interpreter speaks the same
// frames to the supervisor over pipes of its own.
//
// A call ends only once its end is real, and then nothing of the session
// runs until the next call:
//   - python: the driver says X once the call's code has returned, then
//     forks; the fork, with the whole state and only the driver's thread,
//     announces itself (an R frame with its pid) and waits for the next call,
//     and the process that ran the call ends with every thread the call
//     started (the supervisor kills it). The call ends once the fork waits
//     in read(2) on its control input with one thread, where the kernel shows
//     it (/proc/PID/syscall); a forged X without that fork is no end.
//   - javascript: the driver clears the timers, intervals and immediates
//     the call left, aborts its timers/promises and terminates its workers,
//     says X and reads the next call synchronously; the call ends once its
//     main thread waits in read(2) on its control input, where the kernel
//     shows it.
//   - bash: the call ends when bash exits.
// Then the supervisor stops the interpreter (SIGSTOP) and kills every other
// process of the session (and, in docker mode, reaps every zombie as the
// container's init), and only then sends the X frame to the server. The next
// call continues the interpreter (SIGCONT).
//
// Server to supervisor, lines and bytes:
//
//	call <code bytes> <stdin bytes>\n<code><stdin>   run a call
//	files <count>\n and that many "<length> <path>\n<bytes>" records
//	changes\n                                         the files changed since the last time
//	relay <pid>\n                                     name the egress relay pid of the next call (see NameRelay)
//	reset\n                                           kill everything and start a fresh interpreter
//
// Supervisor to server, frames: one kind byte, the payload length as 4
// big-endian bytes, and the payload (at most maxFrame bytes).
//
//	R  ready: the interpreter is loaded and waits (payload: its name and version)
//	O  output the call wrote to its stdout
//	E  output the call wrote to its stderr
//	X  the call ended: "<exit status>[ lost][ signal:<name>][ oom:<count>]"
//	   (lost: the interpreter ended during the call and a fresh one waits;
//	   oom: the OOM kills of the sandbox's memory cgroup, where it can tell)
//	K  the answer to files: "ok", or "refused <index> <why>"; to relay: "ok" or "gone"
//	T  a piece of the tar stream of the changes; t ends it (payload: an error, if any)
//	Z  reset done: a fresh interpreter waits (payload as R)
//	F  the supervisor failed and exits (payload: why)
//
// Between interpreter and supervisor, the call is "<code bytes> <stdin
// bytes>\n<code><stdin>" and the frames are R ("<pid> <name> <version>"),
// O, E and X ("<exit status>").
//
// The driver runs the code in a namespace that persists between calls:
// python's __main__ globals, javascript's global scope (see the drivers). An
// exception is printed as a traceback on the call's stderr and ends the call
// with status 1; the state stays.

//go:embed drivers/supervisor.py
var supervisorSource string

//go:embed drivers/python.py
var pythonDriverSource string

// pythonDriver is the python driver after the function that puts the
// session's packages on sys.path.
var pythonDriver = sandbox.PythonUsePackages + pythonDriverSource

//go:embed drivers/javascript.js
var javascriptDriver string

// Interpreted reports whether sessions of lang keep a live interpreter
// (python, javascript) rather than only files and the working directory.
func Interpreted(lang string) bool { return lang == "python" || lang == "javascript" }

// SupervisorArgs returns the arguments of python3 that run a session's
// supervisor for lang with its control channel on in and out (each a path
// or "fd:N"; or both "listen:NAME", the abstract unix socket NAME, on which
// each connection accepted in turn is the channel, greeted with an R frame
// as the supervisor's start is, or refused with an F frame). interp is the command line that the mode would run lang's
// programs with (interpreter and its arguments): for python, the python
// that runs the supervisor itself (its arguments are not used: the
// supervisor starts isolated and the driver adds the site directories and
// PYTHONPATH); for javascript, node and its arguments; for bash, bash and
// its arguments. relay, when not empty, is the unix socket of the egress
// proxy, the port, and the relay's python program (docker mode's egress):
// the supervisor listens on the port of the loopback and runs the program in
// a fork of its own, with the socket, the port and the listener's descriptor
// as its arguments, to pass each connection to the socket.
func SupervisorArgs(lang, in, out string, interp []string, relay ...string) []string {
	args := []string{"-I", "-S", "-B", "-c", supervisorSource, lang, in, out}
	if len(relay) == 3 {
		args = append(args, "--relay", relay[0], relay[1], relay[2])
	}
	args = append(args, "--")
	switch lang {
	case "python":
		return append(args, pythonDriver)
	case "javascript":
		return append(append(args, interp...), "-e", javascriptDriver, "fd:3", "fd:4")
	}
	return append(args, interp...)
}

// maxFrame is the largest payload a supervisor may send in one frame.
const maxFrame = 4096 - 5

// frame kinds.
const (
	kindReady   = 'R'
	kindStdout  = 'O'
	kindStderr  = 'E'
	kindExit    = 'X'
	kindAnswer  = 'K' // to files and relay
	kindTar     = 'T'
	kindTarEnd  = 't'
	kindResetOK = 'Z'
	kindFail    = 'F'
)

// ErrDriverDied says that a session's supervisor ended, or broke the
// protocol: its sandbox is gone.
var ErrDriverDied = errors.New("the session's supervisor ended")

// Conn speaks the supervisor protocol over a control channel. A reader
// goroutine takes the frames as they come and hands them to the request in
// flight; requests do not overlap (the session runs one at a time), except
// Reset, which may follow a call that is still in flight.
//
// A Conn is broken once the supervisor ended or misbehaved: the caller then
// ends the session's sandbox. Close closes both ends of the channel.
type Conn struct {
	w   io.WriteCloser
	wmu sync.Mutex // one writer at a time
	rc  io.Closer

	mu       sync.Mutex
	sink     *call
	ready    string
	awaiting byte           // the kind of answer a request waits for (K, Z, t), or 0
	answer   chan string    // its payload
	tar      *io.PipeWriter // where T frames go during Changes
	owed     bool           // a cancelled request's answer is still to come (used by one request at a time)

	readyC chan struct{}
	doneC  chan struct{} // closed when the reader ends
	err    error         // why the reader ended; valid once doneC is closed
}

// call is the state of the call in flight.
type call struct {
	out   *sandbox.Output
	exitC chan string
}

// NewConn starts reading frames from r; w carries the requests. Both are
// closed by Close.
func NewConn(w io.WriteCloser, r io.ReadCloser) *Conn {
	c := &Conn{w: w, rc: r, answer: make(chan string, 1), readyC: make(chan struct{}), doneC: make(chan struct{})}
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
				// Closed by Close (the supervisor's run ended, or was
				// ended): no more to say than an end of stream would.
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrClosed) {
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
	c.mu.Lock()
	if c.tar != nil {
		_ = c.tar.CloseWithError(c.err)
	}
	c.mu.Unlock()
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
		if _, err := parseExit(string(p)); err != nil {
			return err
		}
		if c.sink != nil {
			c.sink.exitC <- string(p)
			c.sink = nil
		}
	case kindAnswer, kindResetOK, kindTarEnd:
		if c.awaiting != kind {
			return fmt.Errorf("%w: it answered what was not asked", ErrDriverDied)
		}
		c.awaiting = 0
		if kind == kindTarEnd && c.tar != nil {
			var err error
			if len(p) > 0 {
				err = errors.New(truncate(string(p), 200))
			}
			_ = c.tar.CloseWithError(err)
			c.tar = nil
		}
		c.answer <- string(p)
	case kindTar:
		if c.awaiting != kindTarEnd {
			return fmt.Errorf("%w: it sent an archive that was not asked for", ErrDriverDied)
		}
		if c.tar != nil {
			// Written while holding mu: the collector reads the pipe in a
			// goroutine of its own and never takes mu.
			if _, err := c.tar.Write(p); err != nil {
				c.tar = nil // the collector stopped reading; the rest is dropped
			}
		}
	case kindFail:
		return fmt.Errorf("%w: %s", ErrDriverDied, truncate(string(p), 200))
	default:
		return fmt.Errorf("%w: it sent a frame of unknown kind %q", ErrDriverDied, kind)
	}
	return nil
}

// exitWords is an X frame's payload, read.
type exitWords struct {
	code   int
	lost   bool
	signal string
	ooms   int // -1: not told
}

func parseExit(s string) (exitWords, error) {
	f := strings.Fields(s)
	w := exitWords{ooms: -1}
	bad := fmt.Errorf("%w: it sent an unreadable exit status", ErrDriverDied)
	if len(f) == 0 {
		return w, bad
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 0 || n > 255 {
		return w, bad
	}
	w.code = n
	for _, x := range f[1:] {
		switch {
		case x == "lost":
			w.lost = true
		case strings.HasPrefix(x, "signal:"):
			w.signal = x[len("signal:"):]
		case strings.HasPrefix(x, "oom:"):
			if k, err := strconv.Atoi(x[len("oom:"):]); err == nil && k >= 0 {
				w.ooms = k
			}
		}
	}
	return w, nil
}

// WaitReady waits for the supervisor's ready frame and returns what it said
// (the interpreter and its version). It fails when the supervisor ends
// first, or when ctx ends.
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

// Done is closed when the supervisor's output has ended (it exited, or
// broke the protocol).
func (c *Conn) Done() <-chan struct{} { return c.doneC }

// Outcome says how a call on a Conn ended.
type Outcome int

// The outcomes of Exec.
const (
	// Completed: the call's code ran and its end is real (see above). If
	// the interpreter ended during the call, Result.StateLost says so and a
	// fresh one waits.
	Completed Outcome = iota
	// TimedOut: the call's timeout passed first; the caller resets.
	TimedOut
	// Overflowed: the call's output went past the cap; the caller resets.
	Overflowed
	// Cancelled: ctx ended first; the caller resets.
	Cancelled
	// Died: the supervisor ended or broke the protocol: the sandbox is gone.
	Died
)

// Exec runs one call: it sends code and stdin and waits for the end,
// collecting the call's output within lim.OutputBytes, for at most
// lim.Timeout (0: no limit). The Result has the exit status, the output and
// the duration; TimedOut, Truncated, StateLost and Signal are set as they
// apply. ooms is the count of OOM kills that the supervisor read from its
// memory cgroup (-1 when it cannot tell). Exec kills nothing: on TimedOut,
// Overflowed and Cancelled the caller resets.
func (c *Conn) Exec(ctx context.Context, code, stdin string, lim sandbox.Limits) (res *sandbox.Result, outcome Outcome, ooms int) {
	overflow := make(chan struct{})
	var once sync.Once
	out := sandbox.NewOutput(lim.OutputBytes, func() { once.Do(func() { close(overflow) }) })
	cl := &call{out: out, exitC: make(chan string, 1)}
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

	res = &sandbox.Result{ExitCode: -1}
	start := time.Now()
	wrote := make(chan error, 1)
	go func() {
		msg := make([]byte, 0, 32+len(code)+len(stdin))
		msg = fmt.Appendf(msg, "call %d %d\n", len(code), len(stdin))
		msg = append(append(msg, code...), stdin...)
		wrote <- c.send(msg)
	}()
	var timer <-chan time.Time
	if lim.Timeout > 0 {
		t := time.NewTimer(lim.Timeout)
		defer t.Stop()
		timer = t.C
	}
	outcome, ooms = Completed, -1
	end := func(s string) {
		w, _ := parseExit(s)
		res.ExitCode, res.StateLost, ooms = w.code, w.lost, w.ooms
		res.Signal = w.signal
	}
	for done := false; !done; {
		select {
		case err := <-wrote:
			wrote = nil
			if err != nil {
				outcome, done = Died, true
			}
		case s := <-cl.exitC:
			end(s)
			done = true
		case <-c.doneC:
			// An exit frame read just before the end still counts.
			select {
			case s := <-cl.exitC:
				end(s)
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
	return res, outcome, ooms
}

// send writes one request.
func (c *Conn) send(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(b)
	return err
}

// ask writes a request whose answer is a frame of kind, and waits for it.
// An answer that a cancelled request still owes is waited for first.
func (c *Conn) ask(ctx context.Context, kind byte, req []byte) (string, error) {
	wait := func() (string, error) {
		select {
		case a := <-c.answer:
			return a, nil
		case <-c.doneC:
			return "", c.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if c.owed {
		if _, err := wait(); err != nil {
			return "", err
		}
		c.owed = false
	}
	c.mu.Lock()
	c.awaiting = kind
	c.mu.Unlock()
	if err := c.send(req); err != nil {
		return "", err
	}
	a, err := wait()
	c.owed = err != nil && ctx.Err() != nil
	return a, err
}

// WriteFiles writes files into the session's working directory, never
// through a link: a path whose folders are links or files, a path that is
// a folder, or one the session's code made unwritable is refused with an
// *artifacts.FileError (wrapping artifacts.ErrInvalidFile). Other errors
// mean the supervisor failed, or ctx ended.
func (c *Conn) WriteFiles(ctx context.Context, files []artifacts.Input) error {
	if len(files) == 0 {
		return nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "files %d\n", len(files))
	for _, f := range files {
		fmt.Fprintf(&b, "%d %s\n", len(f.Data), f.Path)
		b.Write(f.Data)
	}
	reply, err := c.ask(ctx, kindAnswer, b.Bytes())
	if err != nil {
		return err
	}
	return filesReply(reply, files)
}

// filesReply reads the supervisor's answer to files.
func filesReply(reply string, files []artifacts.Input) error {
	if reply == "ok" {
		return nil
	}
	if rest, ok := strings.CutPrefix(reply, "refused "); ok {
		f := strings.SplitN(rest, " ", 3)
		if i, err := strconv.Atoi(f[0]); err == nil && i >= 0 && i < len(files) && len(f) >= 2 {
			reason := "is a folder in the working directory already; give the path of a file"
			switch {
			case f[1] == "folder" && len(f) == 3:
				reason = fmt.Sprintf("needs %q to be a folder, but the working directory has a symbolic link or a file there", f[2])
			case f[1] == "cannot" && len(f) == 3:
				// The session's code took the permission away.
				reason = "was not written: " + f[2] + " (the session's code may have made the folder read-only)"
			}
			return &artifacts.FileError{Index: i, Path: files[i].Path, Reason: reason}
		}
	}
	return fmt.Errorf("%w: it answered %q", ErrDriverDied, truncate(reply, 100))
}

// Changes asks for the files of the working directory that changed since
// the last time (all of them the first time) and hands their tar stream to
// read, which need not read it to its end.
func (c *Conn) Changes(ctx context.Context, read func(io.Reader) error) error {
	pr, pw := io.Pipe()
	c.mu.Lock()
	c.tar = pw
	c.mu.Unlock()
	type answer struct {
		s   string
		err error
	}
	got := make(chan answer, 1)
	go func() {
		s, err := c.ask(ctx, kindTarEnd, []byte("changes\n"))
		if err != nil {
			_ = pw.CloseWithError(err)
		}
		got <- answer{s, err}
	}()
	rerr := read(pr)
	// Whatever read left is drained, so that the frames after it flow.
	_, _ = io.Copy(io.Discard, pr)
	a := <-got
	if a.err == nil && a.s != "" {
		a.err = errors.New(truncate(a.s, 200))
	}
	return errors.Join(rerr, a.err)
}

// NameRelay tells the supervisor (listening: kubernetes mode) that the
// process pid of its sandbox is the egress relay of the next call, which
// the server started there from outside the session (an exec into the pod)
// while nothing of the session ran. The supervisor kills it at that call's
// end (or on a reset) with the call's other processes, so that nothing a
// call left on the relay is served in a later one; only one is named. pid
// 0 ends the relay named, if it still runs, and forgets it: call it before
// another relay starts. kept is false when pid is no live process started
// from outside the session (the relay ended). Other errors mean the
// supervisor failed, or ctx ended.
func (c *Conn) NameRelay(ctx context.Context, pid int) (kept bool, err error) {
	reply, err := c.ask(ctx, kindAnswer, fmt.Appendf(nil, "relay %d\n", pid))
	switch {
	case err != nil:
		return false, err
	case reply == "ok":
		return true, nil
	case reply == "gone":
		return false, nil
	}
	return false, fmt.Errorf("%w: it answered %q", ErrDriverDied, truncate(reply, 100))
}

// Reset asks the supervisor to kill every process of the session but
// itself and to start a fresh interpreter, and waits until it has.
func (c *Conn) Reset(ctx context.Context) error {
	_, err := c.ask(ctx, kindResetOK, []byte("reset\n"))
	return err
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
// read end is closed (or the supervisor is gone).
func (c *Conn) Close() error {
	return errors.Join(c.w.Close(), c.rc.Close())
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
