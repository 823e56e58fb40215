// Package audit keeps codeexec's tamper-evident record of every request,
// approval decision and run: Log, an append-only JSON Lines file whose
// entries carry the hash of the previous one (Verify checks it), with the
// latest entries kept in memory for the approvals console (Recent); and
// Runner, the layer of the runner chain that records each request that
// reaches it and each run, and that an approvals.Gate records its requests
// and decisions through (approvals.Recorder).
package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// Event names the kind of an audit entry.
type Event string

// The audit events.
const (
	// EventRequest: a code_execute request arrived (with its code).
	EventRequest Event = "request"
	// EventDecision: the approval decision for a request (also when the
	// policy needed none).
	EventDecision Event = "decision"
	// EventRun: how an approved run ended, or why it could not run.
	EventRun Event = "run"
)

// Entry is one line of the audit log. Seq, Time, Prev and Hash are set by
// the Log; the other fields depend on Event.
type Entry struct {
	Seq   int64     `json:"seq"`
	Time  time.Time `json:"time"`
	Event Event     `json:"event"`
	// ID identifies the request; every entry of one request has the same ID.
	ID string `json:"id"`
	// CodeSHA256 is the hash of the request (language, code, stdin, timeout, files)
	// that was asked for, decided on, or run.
	CodeSHA256 string `json:"code_sha256,omitempty"`

	// request
	Language  string               `json:"language,omitempty"`
	Code      string               `json:"code,omitempty"`
	StdinSize *int                 `json:"stdin_bytes,omitempty"`
	TimeoutMS *int64               `json:"timeout_ms,omitempty"`
	Policy    approvals.Policy     `json:"policy,omitempty"`
	Reasons   []string             `json:"reasons,omitempty"`
	Requester *approvals.Requester `json:"requester,omitempty"`
	// NetworkPolicy is the allowlist the run would reach the network
	// under (CODE_EXEC_NETWORK=allowlist).
	NetworkPolicy *egress.PolicyInfo `json:"network_policy,omitempty"`
	// Session names the session the request runs in (request and run
	// entries; empty for a run of its own).
	Session   string              `json:"session,omitempty"`
	Files     []approvals.AskFile `json:"files,omitempty"`
	Workspace string              `json:"workspace,omitempty"`
	// Packages are the packages installed for the run (request entries).
	Packages []string `json:"packages,omitempty"`
	// Action is what a request that runs no code asks for
	// (approvals.ActionSessionCreate; request entries).
	Action string `json:"action,omitempty"`

	// decision
	Outcome approvals.Outcome `json:"outcome,omitempty"`
	By      string            `json:"by,omitempty"`
	Via     approvals.Via     `json:"via,omitempty"`
	Note    string            `json:"note,omitempty"`

	// run
	ExitCode   *int     `json:"exit_code,omitempty"`
	DurationMS *float64 `json:"duration_ms,omitempty"`
	LimitHit   string   `json:"limit,omitempty"`
	Signal     string   `json:"signal,omitempty"`
	Sandbox    string   `json:"sandbox,omitempty"`
	Error      string   `json:"error,omitempty"`
	// Network is what the run reached and what was refused.
	Network *egress.Report `json:"network,omitempty"`

	// Prev is the Hash of the previous entry ("" for the first).
	Prev string `json:"prev"`
	// Hash is the SHA-256 of this line up to the "hash" key (see Verify).
	// It must stay the last field.
	Hash string `json:"hash"`
}

// Log appends entries to a JSON Lines file, and keeps the latest ones in
// memory (Recent). Each entry is written with one write and synced to disk
// before Append returns, so that an answered request survives a crash.
// Each entry carries the hash of the previous one, so that Verify detects a
// changed, removed or reordered entry. A Log without a file keeps the
// latest entries only.
//
// A Log is safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	f       *os.File
	path    string
	seq     int64
	prev    string
	now     func() time.Time
	closed  bool
	history *history
}

// Open opens (creating if needed, mode 0600) the audit log at path and
// continues its hash chain; its last entries are the first that Recent
// knows. It refuses a file whose last line is incomplete or does not
// verify, since appending would hide the damage; run `codeexec audit
// verify` to see what is wrong. An empty path opens a Log without a file.
// Close the log when done.
func Open(path string) (*Log, error) {
	l := &Log{path: path, now: time.Now, history: newHistory(historySize)}
	if path == "" {
		return l, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	var last [][]byte
	sum, err := verify(f, func(line []byte) {
		if len(last) == historySize {
			last = last[1:]
		}
		last = append(last, append([]byte(nil), line...))
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("the audit log %s does not verify, so codeexec will not append to it (move it aside to start a new one): %w", path, err)
	}
	l.f, l.seq, l.prev = f, sum.Entries, sum.LastHash
	for _, line := range last {
		var e Entry
		if json.Unmarshal(line, &e) == nil {
			l.history.add(e)
		}
	}
	return l, nil
}

// Path returns the file the log writes to ("" for none).
func (l *Log) Path() string { return l.path }

// Recent returns what the record says about the latest n requests, latest
// activity first: the entries appended since the Log was opened, after the
// last ones of its file (a few dozen requests are kept, with their code cut
// to 4 KiB).
func (l *Log) Recent(n int) []Activity { return l.history.recent(n) }

// Append sets e's Seq, Time (if zero), Prev and Hash, and writes it. It
// returns only once the entry is on disk.
func (l *Log) Append(e Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("audit log closed")
	}
	if e.Time.IsZero() {
		e.Time = l.now().UTC()
	}
	if l.f != nil {
		e.Seq = l.seq + 1
		e.Prev = l.prev
		line, hash, err := seal(e)
		if err != nil {
			return fmt.Errorf("encoding an audit entry: %w", err)
		}
		if _, err := l.f.Write(line); err != nil {
			return fmt.Errorf("writing the audit log: %w", err)
		}
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("syncing the audit log: %w", err)
		}
		l.seq, l.prev = e.Seq, hash
	}
	l.history.add(e)
	return nil
}

// Head returns the number of entries and the hash of the last one: keep it
// somewhere else to detect that entries were cut from the end.
func (l *Log) Head() (int64, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq, l.prev
}

// Close closes the file; later Appends fail. It is safe to call twice.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// seal encodes e with its hash as the last field and returns the line
// (with its newline) and the hash. Hidden characters (in code, names,
// notes) are written as \u escapes, so that the log reads as it is.
func seal(e Entry) ([]byte, string, error) {
	e.Hash = ""
	b, err := json.Marshal(e)
	if err != nil {
		return nil, "", err
	}
	b = approvals.EscapeHiddenJSON(b)
	// b ends with `,"hash":""}`: hash what comes before `,"hash"`.
	body, ok := bytes.CutSuffix(b, []byte(`,"hash":""}`))
	if !ok {
		return nil, "", errors.New("hash is not the last field")
	}
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	line := make([]byte, 0, len(b)+len(h)+1)
	line = append(line, body...)
	line = append(line, `,"hash":"`...)
	line = append(line, h...)
	line = append(line, "\"}\n"...)
	return line, h, nil
}

// VerifySummary describes a log that verified.
type VerifySummary struct {
	Entries  int64
	LastHash string
}

// ErrTampered is wrapped by Verify's errors: the log was changed, cut or
// reordered after it was written.
var ErrTampered = errors.New("audit log tampered with")

var hashSuffix = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`,"hash":"([0-9a-f]{64})"}$`) })

// Verify reads a whole audit log and checks every line: its own hash, the
// previous entry's hash it carries, and its sequence number. It returns an
// error wrapping ErrTampered that names the first bad line. An empty log
// verifies. Removing entries from the end of a log cannot be detected from
// the log alone: compare the last hash (logged by the server) too.
func Verify(r io.Reader) (VerifySummary, error) { return verify(r, nil) }

// verify is Verify that also gives each line that verified (without its
// newline) to keep, if not nil.
func verify(r io.Reader, keep func(line []byte)) (VerifySummary, error) {
	var sum VerifySummary
	br := bufio.NewReader(r)
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && err == io.EOF {
			return sum, nil
		}
		if err != nil && err != io.EOF {
			return sum, fmt.Errorf("reading line %d: %w", lineNo, err)
		}
		if !bytes.HasSuffix(line, []byte("\n")) {
			return sum, fmt.Errorf("%w: line %d is incomplete (no newline at the end)", ErrTampered, lineNo)
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		m := hashSuffix().FindSubmatchIndex(line)
		if m == nil {
			return sum, fmt.Errorf("%w: line %d has no hash at its end", ErrTampered, lineNo)
		}
		body := line[:m[0]]
		got := sha256.Sum256(body)
		want := string(line[m[2]:m[3]])
		if hex.EncodeToString(got[:]) != want {
			return sum, fmt.Errorf("%w: line %d was changed (its hash does not match its content)", ErrTampered, lineNo)
		}
		var e struct {
			Seq  int64  `json:"seq"`
			Prev string `json:"prev"`
		}
		if err := json.Unmarshal(append(append([]byte(nil), body...), '}'), &e); err != nil {
			return sum, fmt.Errorf("%w: line %d is not a JSON object: %v", ErrTampered, lineNo, err)
		}
		if e.Prev != sum.LastHash {
			return sum, fmt.Errorf("%w: line %d (seq %d) does not follow the entry before it: an entry was removed, inserted or moved", ErrTampered, lineNo, e.Seq)
		}
		if e.Seq != sum.Entries+1 {
			return sum, fmt.Errorf("%w: line %d has seq %d, want %d", ErrTampered, lineNo, e.Seq, sum.Entries+1)
		}
		sum.Entries, sum.LastHash = e.Seq, want
		if keep != nil {
			keep(line)
		}
	}
}

// VerifyFile verifies the audit log at path (see Verify).
func VerifyFile(path string) (VerifySummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return VerifySummary{}, err
	}
	defer f.Close()
	return Verify(f)
}
