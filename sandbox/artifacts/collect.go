package artifacts

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Kind says how a client gets an artifact.
type Kind uint8

// The kinds of artifacts.
const (
	// KindLink: a link to the artifact, served by a Store.
	KindLink Kind = iota
	// KindImage: the image itself (PNG, JPEG, GIF, WebP or SVG).
	KindImage
	// KindText: the text itself, embedded (small UTF-8 files).
	KindText
)

func (k Kind) String() string {
	switch k {
	case KindImage:
		return "image"
	case KindText:
		return "text"
	}
	return "link"
}

// Artifact is a file that a run created or changed.
type Artifact struct {
	// Path is relative to the run's working directory.
	Path string `json:"path"`
	// Size is the number of bytes in Data.
	Size int64 `json:"size"`
	// MIMEType is sniffed from the content (see Classify).
	MIMEType string `json:"mime_type"`
	// SHA256 is the hex digest of Data.
	SHA256 string `json:"sha256"`
	// URI is where a Store serves the artifact; Store.Put sets it.
	URI string `json:"uri,omitempty"`
	// Kind says how a client gets it.
	Kind Kind `json:"-"`
	// Data is the content.
	Data []byte `json:"-"`
}

// Omission is a file that Collect left out, and why.
type Omission struct {
	Path string `json:"path"`
	// Size is the file's size where it matters to the reason.
	Size int64 `json:"size,omitempty"`
	// Reason completes "left out: ", for example "a symbolic link".
	Reason string `json:"reason"`
}

// IgnoreProgram wraps ignore (DefaultIgnore when nil) so that it also
// ignores the program file at the top of the working directory, which every
// mode writes there and no run brings back.
func IgnoreProgram(programFile string, ignore func(string, bool) bool) func(string, bool) bool {
	if ignore == nil {
		ignore = DefaultIgnore
	}
	return func(p string, isDir bool) bool {
		return (!isDir && p == programFile) || ignore(p, isDir)
	}
}

// Collection is what Collect found.
type Collection struct {
	// Artifacts are the files created or changed, in walk order.
	Artifacts []Artifact
	// Omitted lists files that changed but are not in Artifacts (at most
	// maxOmissions of them; OmittedMore counts the rest).
	Omitted     []Omission
	OmittedMore int
	// Incomplete says why Collect stopped looking before the end of the
	// tree ("" when it saw everything).
	Incomplete string
}

// maxOmissions bounds Collection.Omitted, so that a run that makes a
// million files does not make a million-line answer.
const maxOmissions = 20

// Note says in one or two sentences what was left out, or "" when nothing
// was.
func (c *Collection) Note() string {
	var parts []string
	if n := len(c.Omitted) + c.OmittedMore; n > 0 {
		var names []string
		for i, o := range c.Omitted {
			if i == 5 {
				break
			}
			names = append(names, fmt.Sprintf("%s (%s)", o.Path, o.Reason))
		}
		more := ""
		if rest := n - len(names); rest > 0 {
			more = fmt.Sprintf(" and %d more", rest)
		}
		parts = append(parts, fmt.Sprintf("%d %s left out: %s%s.", n, plural(n, "file was", "files were"), strings.Join(names, "; "), more))
	}
	if c.Incomplete != "" {
		parts = append(parts, "Stopped looking for files: "+c.Incomplete+".")
	}
	return strings.Join(parts, " ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Options bound Take and Collect. A zero cap means the default given.
type Options struct {
	// MaxArtifacts caps the number of artifacts (default 20).
	MaxArtifacts int
	// MaxBytes caps the bytes of all the artifacts together (default 16 MiB).
	// A file that does not fit is left out; a smaller one after it may still
	// fit.
	MaxBytes int64
	// MaxEntries caps the entries (files, folders, links) looked at
	// (default 10000); MaxDepth the folders nested (default 16).
	MaxEntries int
	MaxDepth   int
	// InlineText: a UTF-8 text file up to this size is KindText (default
	// 64 KiB); InlineImage: an image up to this size is KindImage (default
	// 4 MiB). Larger ones are KindLink.
	InlineText  int64
	InlineImage int64
	// Ignore reports whether a path is never an artifact, and a folder is
	// not looked into (default DefaultIgnore). The run's own program file is
	// a good candidate.
	Ignore func(path string, isDir bool) bool
}

// Defaults of Options.
const (
	DefaultMaxArtifacts = 20
	DefaultMaxBytes     = 16 << 20
	DefaultMaxEntries   = 10000
	DefaultMaxDepth     = 16
	DefaultInlineText   = 64 << 10
	DefaultInlineImage  = 4 << 20
)

func (o Options) withDefaults() Options {
	if o.MaxArtifacts <= 0 {
		o.MaxArtifacts = DefaultMaxArtifacts
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.InlineText <= 0 {
		o.InlineText = DefaultInlineText
	}
	if o.InlineImage <= 0 {
		o.InlineImage = DefaultInlineImage
	}
	if o.Ignore == nil {
		o.Ignore = DefaultIgnore
	}
	return o
}

// DefaultIgnore leaves out folders whose names start with "." (the caches
// and settings that tools write: .cache, .config, .npm, .local) and
// __pycache__ folders. Hidden files themselves are artifacts.
func DefaultIgnore(p string, isDir bool) bool {
	if !isDir {
		return false
	}
	name := base(p)
	return strings.HasPrefix(name, ".") || name == "__pycache__"
}

// Snapshot is the state of a tree before a run. The zero Snapshot is an
// empty tree: every file is new.
type Snapshot struct {
	entries map[string]snapEntry
	// incomplete: Take stopped before the end.
	incomplete bool
}

type snapEntry struct {
	typ    EntryType
	size   int64
	mtime  time.Time
	sum    [sha256.Size]byte
	hashed bool
}

// Len returns the number of entries in s.
func (s Snapshot) Len() int { return len(s.entries) }

// Has reports whether s holds path p.
func (s Snapshot) Has(p string) bool {
	_, ok := s.entries[p]
	return ok
}

// Add returns a Snapshot with the entries of both s and t (t's where both
// hold a path).
func (s Snapshot) Add(t Snapshot) Snapshot {
	m := make(map[string]snapEntry, len(s.entries)+len(t.entries))
	for k, v := range s.entries {
		m[k] = v
	}
	for k, v := range t.entries {
		m[k] = v
	}
	return Snapshot{entries: m, incomplete: s.incomplete || t.incomplete}
}

// SnapshotOf is the Snapshot of a fresh directory that holds exactly inputs,
// as a container's run directory does after the files are unpacked there:
// a file is unchanged when its content is.
func SnapshotOf(inputs []Input) Snapshot {
	s := Snapshot{entries: make(map[string]snapEntry, len(inputs))}
	for _, in := range inputs {
		s.entries[in.Path] = snapEntry{typ: TypeRegular, size: int64(len(in.Data)), sum: sha256.Sum256(in.Data), hashed: true}
	}
	return s
}

// Take records the tree src (sizes and modification times, no contents), up
// to opts.MaxEntries entries.
func Take(src Source, opts Options) (Snapshot, error) {
	opts = opts.withDefaults()
	s := Snapshot{entries: make(map[string]snapEntry)}
	n := 0
	err := src.Walk(func(e Entry, _ Opener) error {
		if n++; n > opts.MaxEntries {
			s.incomplete = true
			return errStop
		}
		if e.Type == TypeDir && (depth(e.Path) >= opts.MaxDepth || opts.Ignore(e.Path, true)) {
			return SkipDir
		}
		s.entries[e.Path] = snapEntry{typ: e.Type, size: e.Size, mtime: e.ModTime}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return s, err
}

var errStop = errors.New("stop")

// TakeContents is Take that also records the digest of every regular file
// (reading each one): afterwards, Collect tells a file rewritten with the
// same bytes from a changed one, as with the Snapshot that Write returns.
// Use it on a tree whose files are few and small, such as a run directory
// before the run.
func TakeContents(src Source, opts Options) (Snapshot, error) {
	opts = opts.withDefaults()
	s := Snapshot{entries: make(map[string]snapEntry)}
	n := 0
	err := src.Walk(func(e Entry, open Opener) error {
		if n++; n > opts.MaxEntries {
			s.incomplete = true
			return errStop
		}
		if e.Type == TypeDir && (depth(e.Path) >= opts.MaxDepth || opts.Ignore(e.Path, true)) {
			return SkipDir
		}
		se := snapEntry{typ: e.Type, size: e.Size, mtime: e.ModTime}
		if e.Type == TypeRegular && open != nil {
			if data, err := readAll(open, e.Size); err == nil {
				se.sum, se.hashed, se.size = sha256.Sum256(data), true, int64(len(data))
			}
		}
		s.entries[e.Path] = se
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return s, err
}

// Collect walks src and returns the regular files that are not in before,
// or whose size, content or modification time differ from before's, within
// opts' caps. Symbolic links and special files that appeared are listed in
// Omitted, never followed or read; so are entries whose names are unfit for
// an artifact (control characters, not UTF-8, a backslash: see
// EscapeName), with their names escaped, a folder not looked into; ignored
// paths are left out silently.
// An error means the walk itself failed; a file that cannot be read is
// listed in Omitted.
func Collect(src Source, before Snapshot, opts Options) (*Collection, error) {
	return collect(src, before, opts, nil)
}

// CollectNext is Collect that also returns the Snapshot to find the next
// changes against: the regular files it saw whose content it knows, each
// with its digest (those it brought back, and those it found unchanged
// from before), and the entries it listed for their names. A source that may list again a file that has not changed
// since (a session's listing by change time, with a margin) gives it as
// before next time, so that such a file is not reported twice.
func CollectNext(src Source, before Snapshot, opts Options) (*Collection, Snapshot, error) {
	seen := Snapshot{entries: map[string]snapEntry{}}
	c, err := collect(src, before, opts, &seen)
	return c, seen, err
}

func collect(src Source, before Snapshot, opts Options, seen *Snapshot) (*Collection, error) {
	opts = opts.withDefaults()
	c := &Collection{}
	keep := func(p string, e snapEntry) {
		if seen != nil {
			seen.entries[p] = e
		}
	}
	var used int64
	n := 0
	omit := func(p string, size int64, reason string) {
		if len(c.Omitted) < maxOmissions {
			c.Omitted = append(c.Omitted, Omission{Path: p, Size: size, Reason: reason})
		} else {
			c.OmittedMore++
		}
	}
	err := src.Walk(func(e Entry, open Opener) error {
		if n++; n > opts.MaxEntries {
			c.Incomplete = fmt.Sprintf("the working directory holds more than %d entries", opts.MaxEntries)
			return errStop
		}
		if opts.Ignore(e.Path, e.Type == TypeDir) {
			if e.Type == TypeDir {
				return SkipDir
			}
			return nil
		}
		prev, existed := before.entries[e.Path]
		if problem := nameProblem(e.Path); problem != "" {
			// Listed once, when it appears or changes, escaped; a folder
			// is not looked into.
			changed := !existed || prev.typ != e.Type || prev.size != e.Size || !prev.mtime.Equal(e.ModTime)
			if e.Type == TypeDir {
				if !existed {
					omit(EscapeName(e.Path)+"/", 0, problem+"; nothing in it was looked at")
				}
				keep(e.Path, snapEntry{typ: TypeDir})
				return SkipDir
			}
			if changed {
				omit(EscapeName(e.Path), e.Size, problem)
			}
			keep(e.Path, snapEntry{typ: e.Type, size: e.Size, mtime: e.ModTime})
			return nil
		}
		switch e.Type {
		case TypeDir:
			if depth(e.Path) >= opts.MaxDepth {
				omit(e.Path+"/", 0, fmt.Sprintf("a folder nested more than %d deep", opts.MaxDepth))
				return SkipDir
			}
			return nil
		case TypeSymlink, TypeOther:
			if !existed || prev.typ != e.Type {
				omit(e.Path, 0, "a "+e.Type.String()+", not followed")
			}
			return nil
		}
		if existed && prev.typ == TypeRegular && prev.size == e.Size && !prev.hashed && prev.mtime.Equal(e.ModTime) {
			keep(e.Path, prev)
			return nil // unchanged by size and time; contents were not recorded
		}
		var data []byte
		if existed && prev.typ == TypeRegular && prev.size == e.Size && prev.hashed {
			// As large as an input file, so within the caps on inputs.
			d, err := readAll(open, e.Size)
			if err != nil {
				omit(e.Path, e.Size, "could not be read: "+err.Error())
				return nil
			}
			if sha256.Sum256(d) == prev.sum {
				keep(e.Path, prev)
				return nil // same content
			}
			data = d
		}
		switch {
		case len(c.Artifacts) >= opts.MaxArtifacts:
			omit(e.Path, e.Size, fmt.Sprintf("over the limit of %d files", opts.MaxArtifacts))
			return nil
		case used+e.Size > opts.MaxBytes:
			omit(e.Path, e.Size, fmt.Sprintf("%s, over the limit of %s for all files together", FormatBytes(e.Size), FormatBytes(opts.MaxBytes)))
			return nil
		}
		if data == nil {
			d, err := readAll(open, e.Size)
			if err != nil {
				omit(e.Path, e.Size, "could not be read: "+err.Error())
				return nil
			}
			data = d
		}
		used += int64(len(data))
		c.Artifacts = append(c.Artifacts, newArtifact(e.Path, data, opts))
		keep(e.Path, snapEntry{typ: TypeRegular, size: int64(len(data)), mtime: e.ModTime, sum: sha256.Sum256(data), hashed: true})
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	if before.incomplete && c.Incomplete == "" {
		c.Incomplete = fmt.Sprintf("the working directory held more than %d entries before the run, so files that existed then may be reported as new", opts.MaxEntries)
	}
	return c, err
}

// nameProblem says why p, the path of something a run left in its working
// directory, cannot be an artifact's path (as the reason of an Omission), or
// "" when it can. An artifact's path is one that its URI carries back (see
// CleanPath), and that a client can show without the name repainting a
// terminal or forging lines.
func nameProblem(p string) string {
	switch {
	case !utf8.ValidString(p):
		return "its name is not valid UTF-8 (shown escaped)"
	case strings.IndexFunc(p, isControl) >= 0:
		return "its name holds a control character (shown escaped), such as an escape sequence, a newline or a bidirectional override"
	case strings.Contains(p, `\`):
		return "its name holds a backslash (shown escaped), which artifact URIs do not carry"
	}
	if _, reason := CleanPath(p); reason != "" {
		return "its path " + reason
	}
	return ""
}

// EscapeName writes a path that nameProblem refuses the way the listing of
// what was left out shows it: as the inside of a Go string literal (\x1b,
// \n, \t, \u202e, \xff; a backslash as \\), every character printable.
func EscapeName(p string) string {
	q := strconv.Quote(p)
	return q[1 : len(q)-1]
}

// newArtifact classifies data and fills an Artifact.
func newArtifact(p string, data []byte, opts Options) Artifact {
	sum := sha256.Sum256(data)
	mt := Classify(p, data)
	a := Artifact{Path: p, Size: int64(len(data)), MIMEType: mt.Type, SHA256: hex.EncodeToString(sum[:]), Data: data, Kind: KindLink}
	switch {
	case mt.Image && a.Size <= opts.InlineImage:
		a.Kind = KindImage
	case mt.Text && a.Size <= opts.InlineText:
		a.Kind = KindText
	}
	return a
}

// readAll reads at most size bytes of a file: a file that grew since it was
// listed is cut at the size it had then, so that the caps hold.
func readAll(open Opener, size int64) ([]byte, error) {
	r, err := open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var b bytes.Buffer
	b.Grow(int(size))
	if _, err := io.Copy(&b, io.LimitReader(r, size)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
