//go:build !unix

package artifacts

import (
	"errors"
)

// errUnsupported: the safe directory walk needs openat(2) with O_NOFOLLOW.
var errUnsupported = errors.New("artifacts: files in and out of a run directory need a Unix system")

// DirSource is a Source that walks a directory; on this system it fails.
type DirSource struct {
	Dir string
}

// Walk implements Source.
func (d DirSource) Walk(func(Entry, Opener) error) error { return errUnsupported }

// WriteOptions say who owns what Write creates.
type WriteOptions struct {
	Chown    bool
	UID, GID int
}

// Write writes inputs into dir; on this system it fails.
func Write(dir string, inputs []Input, opts WriteOptions) (Snapshot, error) {
	if len(inputs) == 0 {
		return Snapshot{}, nil
	}
	return Snapshot{}, errUnsupported
}
