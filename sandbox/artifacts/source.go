package artifacts

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"
)

// EntryType is the kind of an Entry.
type EntryType uint8

// The kinds of entries. Only regular files can become artifacts.
const (
	TypeRegular EntryType = iota
	TypeDir
	TypeSymlink
	// TypeOther is anything else: a device, a FIFO, a socket, a hard link
	// in a tar stream.
	TypeOther
)

func (t EntryType) String() string {
	switch t {
	case TypeRegular:
		return "regular file"
	case TypeDir:
		return "folder"
	case TypeSymlink:
		return "symbolic link"
	}
	return "special file"
}

// Entry is one thing in a Source.
type Entry struct {
	// Path is clean, relative to the top of the Source, slash-separated.
	Path    string
	Type    EntryType
	Size    int64
	ModTime time.Time
}

// Opener returns the content of the regular file being visited. It may be
// called at most once, and only before the visit function returns; the
// caller closes what it returns.
type Opener func() (io.ReadCloser, error)

// Source is a tree of files that Take and Collect walk.
type Source interface {
	// Walk calls visit for every entry below the top of the tree, never
	// following a symbolic link. In a directory, entries come in lexical
	// order, each folder before what it holds. open is nil unless the entry
	// is a regular file. When visit returns SkipDir for a folder, Walk skips
	// what the folder holds; any other error stops the walk, and Walk
	// returns it.
	Walk(visit func(e Entry, open Opener) error) error
}

// SkipDir is returned by a visit function to skip a folder's contents.
var SkipDir = fs.SkipDir

// TarSource is a Source that reads a tar stream, such as the one that a
// container sends back with its run directory. Entries whose names are not
// clean relative paths (absolute, with "..", "." or empty elements) are
// skipped; a name that is otherwise unfit for an artifact (control
// characters, not UTF-8) is passed on, for Collect to list it as left out.
// Hard links are TypeOther, since their content is elsewhere in the stream.
type TarSource struct {
	R io.Reader
}

var _ Source = TarSource{}

// Walk implements Source. Entries come in the order of the stream.
func (t TarSource) Walk(visit func(Entry, Opener) error) error {
	tr := tar.NewReader(t.R)
	var skipped []string // folders whose contents visit skipped, with a trailing "/"
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		if name == "" || name == "." {
			continue
		}
		clean := path.Clean(name)
		if clean != name || path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			continue
		}
		if underAny(clean, skipped) {
			continue
		}
		e := Entry{Path: clean, Size: h.Size, ModTime: h.ModTime}
		var open Opener
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
			e.Type = TypeRegular
			opened := false
			open = func() (io.ReadCloser, error) {
				if opened {
					return nil, errors.New("artifacts: an entry of a tar stream can be read once")
				}
				opened = true
				return io.NopCloser(io.LimitReader(tr, h.Size)), nil
			}
		case tar.TypeDir:
			e.Type, e.Size = TypeDir, 0
		case tar.TypeSymlink:
			e.Type, e.Size = TypeSymlink, 0
		default:
			e.Type, e.Size = TypeOther, 0
		}
		err = visit(e, open)
		switch {
		case errors.Is(err, SkipDir) && e.Type == TypeDir:
			skipped = append(skipped, clean+"/")
		case errors.Is(err, SkipDir):
		case err != nil:
			return err
		}
	}
}

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}

// depth is the number of folders above p.
func depth(p string) int { return strings.Count(p, "/") }

// base is the last element of p.
func base(p string) string { return path.Base(p) }
