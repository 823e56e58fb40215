package artifacts

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"
)

// URIScheme and URIPrefix start every artifact URI:
// codeexec://runs/<run id>/<path>.
const (
	URIScheme = "codeexec"
	URIPrefix = URIScheme + "://runs/"
	// URITemplate is the RFC 6570 template of artifact URIs, for an MCP
	// resource template.
	URITemplate = URIPrefix + "{run_id}/{+path}"
)

// ErrNotFound: no artifact is kept at that URI (it never existed, it
// belongs to another client, or it expired or was evicted).
var ErrNotFound = errors.New("artifact not found")

// ErrBadURI: the URI is not an artifact URI.
var ErrBadURI = errors.New("not an artifact URI")

// NewRunID returns a fresh, unguessable run id (128 random bits in hex).
func NewRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it panics instead)
	return hex.EncodeToString(b[:])
}

// URI returns the URI of the artifact at path p (clean, relative) of run
// runID. Each path element is percent-escaped; "/" separates them.
func URI(runID, p string) string {
	els := strings.Split(p, "/")
	for i, el := range els {
		els[i] = url.PathEscape(el)
	}
	return URIPrefix + url.PathEscape(runID) + "/" + strings.Join(els, "/")
}

// ParseURI splits an artifact URI into its run id and path, or returns an
// error wrapping ErrBadURI.
func ParseURI(uri string) (runID, p string, err error) {
	rest, ok := strings.CutPrefix(uri, URIPrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: %q does not start with %s", ErrBadURI, uri, URIPrefix)
	}
	id, escaped, ok := strings.Cut(rest, "/")
	if !ok || id == "" || escaped == "" {
		return "", "", fmt.Errorf("%w: %q has no run id and path (%s<run id>/<path>)", ErrBadURI, uri, URIPrefix)
	}
	if strings.ContainsAny(escaped, "?#") {
		return "", "", fmt.Errorf("%w: %q has a query or fragment", ErrBadURI, uri)
	}
	unescaped, err := url.PathUnescape(escaped)
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: %v", ErrBadURI, uri, err)
	}
	if runID, err = url.PathUnescape(id); err != nil {
		return "", "", fmt.Errorf("%w: %q: %v", ErrBadURI, uri, err)
	}
	clean, reason := CleanPath(unescaped)
	if reason != "" || clean != unescaped {
		return "", "", fmt.Errorf("%w: the path of %q is not a clean relative path", ErrBadURI, uri)
	}
	return runID, clean, nil
}

// Store keeps the artifacts of recent runs for a while, in memory, and
// serves them by URI. A run's artifacts expire ttl after they were put;
// when keeping a new run's would take more than maxBytes in all, the oldest
// runs are evicted first. Expired runs are dropped on the next Put or Get
// (there is no background goroutine, nothing to close).
//
// Every run belongs to an owner (an MCP client session, say): Get with
// another owner finds nothing, as if the run did not exist.
//
// A Store is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	ttl      time.Duration
	maxBytes int64
	now      func() time.Time
	runs     map[string]*storedRun
	order    []string // run ids, oldest first
	used     int64
}

type storedRun struct {
	owner   string
	expires time.Time
	files   map[string]Artifact
	bytes   int64
}

// NewStore returns a Store that keeps artifacts for ttl and at most maxBytes
// of them in all.
func NewStore(ttl time.Duration, maxBytes int64) *Store {
	return &Store{ttl: ttl, maxBytes: maxBytes, now: time.Now, runs: make(map[string]*storedRun)}
}

// Put keeps the artifacts of run runID for owner, sets each kept artifact's
// URI in arts (in place) and returns how many it kept: all of them, unless
// they are more than maxBytes together, when it keeps those that fit, in
// order. Putting a run id twice adds to what the run has.
func (s *Store) Put(runID, owner string, arts []Artifact) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.dropExpiredLocked(now)
	run := s.runs[runID]
	if run == nil {
		run = &storedRun{owner: owner, files: make(map[string]Artifact)}
		s.runs[runID] = run
		s.order = append(s.order, runID)
	}
	run.expires = now.Add(s.ttl)
	kept := 0
	for i := range arts {
		a := arts[i]
		if a.Size > s.maxBytes {
			continue
		}
		for s.used+a.Size > s.maxBytes && s.evictOldestLocked(runID) {
		}
		if s.used+a.Size > s.maxBytes {
			continue
		}
		if old, ok := run.files[a.Path]; ok {
			s.used -= old.Size
			run.bytes -= old.Size
		}
		a.URI = URI(runID, a.Path)
		arts[i].URI = a.URI
		run.files[a.Path] = a
		run.bytes += a.Size
		s.used += a.Size
		kept++
	}
	if len(run.files) == 0 {
		s.removeLocked(runID)
	}
	return kept
}

// Get returns the artifact at uri if owner's run still has it, or an error
// wrapping ErrBadURI or ErrNotFound. The returned Data must not be modified.
func (s *Store) Get(uri, owner string) (Artifact, error) {
	runID, p, err := ParseURI(uri)
	if err != nil {
		return Artifact{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropExpiredLocked(s.now())
	run := s.runs[runID]
	if run == nil || run.owner != owner {
		return Artifact{}, fmt.Errorf("%w: nothing is kept at %s; artifacts are kept for %s after their run, so run the code again to make it anew", ErrNotFound, uri, s.ttl)
	}
	a, ok := run.files[p]
	if !ok {
		return Artifact{}, fmt.Errorf("%w: run %s made no file %q", ErrNotFound, runID, p)
	}
	return a, nil
}

// TTL returns how long a run's artifacts are kept.
func (s *Store) TTL() time.Duration { return s.ttl }

// Used returns the bytes kept now.
func (s *Store) Used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// dropExpiredLocked drops the runs whose time is up.
func (s *Store) dropExpiredLocked(now time.Time) {
	live := s.order[:0]
	for _, id := range s.order {
		if r := s.runs[id]; now.Before(r.expires) {
			live = append(live, id)
		} else {
			s.used -= r.bytes
			delete(s.runs, id)
		}
	}
	clear(s.order[len(live):])
	s.order = live
}

// evictOldestLocked removes the oldest run other than keep, and reports
// whether there was one.
func (s *Store) evictOldestLocked(keep string) bool {
	for _, id := range s.order {
		if id != keep {
			s.removeLocked(id)
			return true
		}
	}
	return false
}

func (s *Store) removeLocked(id string) {
	if r, ok := s.runs[id]; ok {
		s.used -= r.bytes
		delete(s.runs, id)
	}
	for i, o := range s.order {
		if o == id {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}
