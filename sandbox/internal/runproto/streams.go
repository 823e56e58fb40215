package runproto

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// earlyLimit bounds what a container may write before a run takes it.
const earlyLimit = 64 << 10

// Streams receives a container's demultiplexed stdout and stderr from the
// moment it starts. For a run container (framed) it takes the ready and ack
// bytes off the front of stdout, the first trailer on stdout (and the archive
// after it), and holds a trailer at the end of stderr, passing the rest to the
// run's Output once a run has attached one. Until then, output is kept (up
// to earlyLimit) and handed over on attach, so that a warm container loses
// nothing a cold one would show. Which trailer ends the run is known only
// once the stream has ended (see the package documentation): Final says.
// It is safe for concurrent use.
type Streams struct {
	mu     sync.Mutex
	framed bool
	out    *sandbox.Output
	early  [2]bytes.Buffer // stdout, stderr before a run attached

	state int // stdout of a framed stream: 0 expects ready, 1 expects ack, 2 program output
	// scan[0] finds the first trailer on stdout; scan[1] holds the last
	// line of stderr while it looks like a trailer.
	scan [2]trailerScanner

	// Ready is closed when the ready byte arrived: the bootstrap waits for
	// its program.
	Ready chan struct{}
	acked chan struct{} // closed when the ack byte arrived
	// trailers is closed when a trailer has come on both streams: with a
	// secret nonce (Supervisor.Secret), the run's end.
	trailers chan struct{}
	// changed is closed and replaced whenever output arrives or the
	// archive has been read (see Settled); cmu guards it.
	cmu     sync.Mutex
	changed chan struct{}
	bad     string // a protocol violation, for the log

	stdoutTrailer string // the line of the first stdout trailer, once found

	// The archive of the working directory that follows the stdout
	// trailer, when a run asked for its artifacts (collect).
	archive   *io.PipeWriter // nil until the trailer announced one, and once it ended
	collector *collector     // nil unless the run asked
}

// collector reads the archive of a run's working directory as it arrives
// and keeps what artifacts.Collect finds in it.
type collector struct {
	r      *io.PipeReader
	w      *io.PipeWriter
	done   chan struct{}
	result *artifacts.Collection
}

// NewStreams reads the output of a container or pod. framed: it runs the
// supervisor (Command) with the trailer nonce; otherwise its output is passed
// on as it is (docker mode's probe).
func NewStreams(framed bool, nonce string) *Streams {
	st := &Streams{framed: framed, Ready: make(chan struct{}), acked: make(chan struct{}), trailers: make(chan struct{}), changed: make(chan struct{})}
	if framed {
		for i := range st.scan {
			st.scan[i].needle = []byte(nonce + " ")
		}
		st.scan[1].last = true
	}
	return st
}

// Attach makes out the destination of the program's output, after what
// arrived before.
func (st *Streams) Attach(out *sandbox.Output) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.out = out
	if st.early[0].Len() > 0 {
		_, _ = out.Stdout().Write(st.early[0].Bytes())
	}
	if st.early[1].Len() > 0 {
		_, _ = out.Stderr().Write(st.early[1].Bytes())
	}
	st.early[0].Reset()
	st.early[1].Reset()
}

// Collect asks for the artifacts of the run: the archive that follows the
// stdout trailer is read, as it arrives, by artifacts.Collect with before
// and opts. Call it before the run's input is sent; artifacts returns the
// result.
func (st *Streams) Collect(before artifacts.Snapshot, opts artifacts.Options) {
	r, w := io.Pipe()
	c := &collector{r: r, w: w, done: make(chan struct{})}
	go func() {
		res, err := artifacts.Collect(artifacts.TarSource{R: r}, before, opts)
		if err != nil {
			res.Incomplete = "the archive of the working directory could not be read to the end (" + err.Error() + ")"
		}
		c.result = res
		close(c.done)
		st.notify() // never mu: a write may hold it, waiting for this reader
		// What follows the end of the archive (tar's padding) is dropped,
		// until the stream ends.
		_, _ = io.Copy(io.Discard, r)
	}()
	st.mu.Lock()
	st.collector = c
	st.mu.Unlock()
}

// Artifacts waits until the archive has been read, at most until stop is
// closed, and returns what was found (nil when the run did not ask). An
// archive cut short by stop is reported in the Collection.
func (st *Streams) Artifacts(stop <-chan struct{}) *artifacts.Collection {
	st.mu.Lock()
	c := st.collector
	st.mu.Unlock()
	if c == nil {
		return nil
	}
	select {
	case <-c.done:
	case <-stop:
		_ = c.r.CloseWithError(errArchiveAbandoned)
		<-c.done
	}
	return c.result
}

// errArchiveAbandoned ends an archive that did not arrive in time;
// errArchiveCut one that the container's output ended in the middle of.
var (
	errArchiveAbandoned = errors.New("it did not arrive in time")
	errArchiveCut       = errors.New("the container's output ended in the middle of it")
)

// endArchiveLocked ends the archive being received (if any) with err, which
// the collector sees if it still needs bytes; the caller holds mu.
func (st *Streams) endArchiveLocked(err error) {
	if st.archive != nil {
		_ = st.archive.CloseWithError(err)
		st.archive = nil
	}
}

// emit passes program output on; the caller holds mu.
func (st *Streams) emit(i int, p []byte) {
	if len(p) == 0 {
		return
	}
	if st.out == nil {
		if room := earlyLimit - st.early[i].Len(); room > 0 {
			st.early[i].Write(p[:min(len(p), room)])
		}
		return
	}
	if i == 0 {
		_, _ = st.out.Stdout().Write(p)
	} else {
		_, _ = st.out.Stderr().Write(p)
	}
}

func (st *Streams) write(i int, p []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	defer st.notify()
	if !st.framed {
		st.emit(i, p)
		return
	}
	if i == 0 {
		for st.state < 2 && len(p) > 0 {
			want, ch := byte(ReadyMarker), st.Ready
			if st.state == 1 {
				want, ch = AckMarker, st.acked
			}
			if p[0] != want {
				st.bad = "the container's first output was not its bootstrap's"
				st.state = 2
				break
			}
			close(ch)
			st.state++
			p = p[1:]
		}
	}
	sc := &st.scan[i]
	if i == 0 && sc.complete {
		if st.archive != nil {
			// Written without mu's protection being needed by the reader:
			// the collector never takes mu.
			_, _ = st.archive.Write(p)
		}
		return // what comes after the archive is dropped
	}
	line, rest, found := sc.feed(p, func(b []byte) { st.emit(i, b) })
	if st.scan[0].complete && st.scan[1].complete {
		select {
		case <-st.trailers:
		default:
			close(st.trailers)
		}
	}
	if i != 0 || !found {
		return
	}
	st.stdoutTrailer = line
	if st.collector != nil {
		if _, _, archive := parseTrailer(line); archive {
			st.archive = st.collector.w
			_, _ = st.archive.Write(rest)
		} else {
			_ = st.collector.w.Close() // nothing in the working directory
		}
	}
}

// End is called once the stream has ended: output held back while looking
// for a trailer that never came is passed on.
func (st *Streams) End() {
	st.mu.Lock()
	defer st.mu.Unlock()
	// A complete archive has been read to its end marker by now (a pipe
	// write returns once the reader has the bytes), so only a reader that
	// still needs bytes sees this error: the archive was cut short. A pipe
	// already closed (no archive came) keeps its end.
	st.endArchiveLocked(errArchiveCut)
	if st.collector != nil {
		_ = st.collector.w.CloseWithError(errArchiveCut)
	}
	for i := range st.scan {
		st.scan[i].flush(func(b []byte) { st.emit(i, b) })
	}
}

// Final returns the exit status and OOM kill count of the trailer that ends
// stderr (ooms is -1 when the container could not tell), and whether there
// is one. Call it once the stream has ended; only the engine's exit status
// says whether PID 1 wrote it (see the package documentation).
func (st *Streams) Final() (status, ooms int, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	sc := &st.scan[1]
	if !sc.complete {
		return -1, -1, false
	}
	status, ooms, _ = parseTrailer(string(sc.line))
	return status, ooms, status >= 0
}

// ArchiveTrusted reports whether the stdout trailer that started the
// archive carries the status and OOM count of the final stderr trailer. If
// not, the program wrote a copy of a trailer before PID 1 did, and what
// followed it on stdout was the program's, not its working directory.
func (st *Streams) ArchiveTrusted() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.scan[0].complete || !st.scan[1].complete {
		return false
	}
	f, g := strings.Fields(st.stdoutTrailer), strings.Fields(string(st.scan[1].line))
	return len(f) == 3 && len(g) == 2 && f[0] == g[0] && f[1] == g[1]
}

// Acked reports whether the bootstrap's ack byte arrived: it took the
// program.
func (st *Streams) Acked() bool {
	select {
	case <-st.acked:
		return true
	default:
		return false
	}
}

// parseTrailer reads "<status> <oom kills>[ <archive follows>]"; an
// unreadable count is -1.
func parseTrailer(line string) (status, ooms int, archive bool) {
	f := strings.Fields(line)
	status, ooms = -1, -1
	archive = len(f) >= 3 && f[2] == "1"
	if len(f) >= 1 {
		if n, err := strconv.Atoi(f[0]); err == nil {
			status = n
		}
	}
	if len(f) >= 2 {
		if n, err := strconv.Atoi(f[1]); err == nil {
			ooms = n
		}
	}
	return status, ooms, archive
}

// partialNeedle returns the length of the longest tail of p that is a
// proper prefix of needle.
func partialNeedle(p, needle []byte) int {
	for k := min(len(needle)-1, len(p)); k > 0; k-- {
		if bytes.HasSuffix(p, needle[:k]) {
			return k
		}
	}
	return 0
}

// trailerScanner passes a stream on while looking for needle. It holds back
// at most len(needle)-1 bytes that might be the start of it; once the needle
// is found, it collects the rest of the line (a line longer than maxTrailer
// is no trailer, and goes on as output). Without last, the first complete
// trailer ends the scan and nothing after it is passed on. With last, a
// trailer is held only while nothing follows it: more bytes make it output
// again and the scan goes on, so that a trailer left held at the end of the
// stream is the stream's last line.
type trailerScanner struct {
	needle   []byte
	last     bool
	pend     []byte // output that may start the needle
	found    bool   // the needle was found: line collects the rest
	line     []byte
	complete bool // line is a whole trailer line
}

// feed consumes p, passing program output to emit. It returns the trailer
// line (without the needle and the newline) once it is complete, and what
// followed the newline in p.
func (sc *trailerScanner) feed(p []byte, emit func([]byte)) (string, []byte, bool) {
	for {
		if sc.complete {
			if len(p) == 0 {
				return "", nil, false
			}
			// More after a held trailer: it was the program's.
			sc.drop(emit)
		}
		if !sc.found {
			sc.pend = append(sc.pend, p...)
			i := bytes.Index(sc.pend, sc.needle)
			if i < 0 {
				// Hold back only a tail that could start the needle, so that
				// output reaches observers as the program writes it.
				if keep := partialNeedle(sc.pend, sc.needle); len(sc.pend) > keep {
					emit(sc.pend[:len(sc.pend)-keep])
					sc.pend = append([]byte(nil), sc.pend[len(sc.pend)-keep:]...)
				}
				return "", nil, false
			}
			emit(sc.pend[:i])
			p = sc.pend[i+len(sc.needle):]
			sc.pend = nil
			sc.found = true
		}
		j := bytes.IndexByte(p, '\n')
		if j < 0 {
			sc.line = append(sc.line, p...)
			if len(sc.line) > maxTrailer {
				sc.drop(emit)
			}
			return "", nil, false
		}
		sc.line = append(sc.line, p[:j]...)
		p = p[j+1:]
		if len(sc.line) > maxTrailer {
			sc.line = append(sc.line, '\n')
			sc.drop(emit)
			continue
		}
		sc.complete = true
		if !sc.last || len(p) == 0 {
			return string(sc.line), p, true
		}
	}
}

// drop passes on what the scanner holds as output, and looks for the needle
// again.
func (sc *trailerScanner) drop(emit func([]byte)) {
	held := append(append([]byte(nil), sc.needle...), sc.line...)
	if sc.complete {
		held = append(held, '\n')
	}
	emit(held)
	sc.found, sc.complete, sc.line = false, false, nil
}

// flush passes on, at the end of the stream, what is held back and is no
// trailer.
func (sc *trailerScanner) flush(emit func([]byte)) {
	switch {
	case sc.complete:
	case sc.found:
		sc.drop(emit)
	default:
		emit(sc.pend)
		sc.pend = nil
	}
}

// notify tells Settled's callers that something changed.
func (st *Streams) notify() {
	st.cmu.Lock()
	close(st.changed)
	st.changed = make(chan struct{})
	st.cmu.Unlock()
}

// Settled reports whether the output so far ends the way a supervisor's
// end does: the stdout trailer has arrived, so has the archive after it when
// the run collects one (Collect), and stderr ends with a trailer line. It
// also returns a channel that is closed at the next change. A program can
// make the output look settled while it runs (see the package
// documentation): this only tells a supervisor that holds (Command) that it
// may exit, never how the run ended.
func (st *Streams) Settled() (bool, <-chan struct{}) {
	st.cmu.Lock()
	changed := st.changed
	st.cmu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	ok := st.scan[0].complete && st.scan[1].complete
	if ok && st.collector != nil {
		select {
		case <-st.collector.done:
		default:
			ok = false
		}
	}
	return ok, changed
}

// Stdout and Stderr are the writers that the container's output streams are
// copied to; a write never fails.
func (st *Streams) Stdout() io.Writer { return streamWriter{st, 0} }

// Stderr: see Stdout.
func (st *Streams) Stderr() io.Writer { return streamWriter{st, 1} }

// streamWriter is one stream of a Streams.
type streamWriter struct {
	st *Streams
	i  int
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.st.write(w.i, p)
	return len(p), nil
}

// Finished applies the rule that decides a run's end (see the package
// documentation): the supervisor ended the run, and its trailer's exit
// status and OOM kill count (-1 when the container could not tell) are the
// result, only when the output stream has ended (ended), the container's
// runtime reported that PID 1 exited with status 0 (exit0) and stderr ends
// with a trailer. Otherwise ok is false, and the runtime's view decides.
func (st *Streams) Finished(ended, exit0 bool) (status, ooms int, ok bool) {
	if !st.framed || !ended || !exit0 {
		return -1, -1, false
	}
	return st.Final()
}

// Trailers returns a channel that is closed once a trailer has come on
// both streams. Only with a supervisor whose nonce is a secret
// (Supervisor.Secret) is that the run's end: otherwise a program that
// learned the nonce can forge both (see Finished).
func (st *Streams) Trailers() <-chan struct{} { return st.trailers }

// Framed reports whether the output is a run supervisor's.
func (st *Streams) Framed() bool { return st.framed }

// Violation describes what broke the protocol, for the log ("" when nothing did).
func (st *Streams) Violation() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.bad
}
