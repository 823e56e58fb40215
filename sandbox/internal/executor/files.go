package executor

import (
	"errors"
	"fmt"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// Owner is the host user that owns what a run may change, when it is not
// the server's own.
type Owner struct {
	UID, GID int
}

// WriteFiles writes a request's files into the run directory dir (owned by
// owner, when not nil) and returns the snapshot that CollectArtifacts
// compares with. An error about a file wraps artifacts.ErrInvalidFile;
// another one, sandbox.ErrSandboxUnavailable.
func WriteFiles(dir string, files []artifacts.Input, owner *Owner) (artifacts.Snapshot, error) {
	opts := artifacts.WriteOptions{}
	if owner != nil {
		opts = artifacts.WriteOptions{Chown: true, UID: owner.UID, GID: owner.GID}
	}
	snap, err := artifacts.Write(dir, files, opts)
	switch {
	case err == nil:
		return snap, nil
	case errors.Is(err, artifacts.ErrInvalidFile):
		return snap, err
	}
	return snap, fmt.Errorf("%w: writing the request's files: %v", sandbox.ErrSandboxUnavailable, err)
}

// CollectArtifacts returns what the run created or changed in dir since
// before, within opts' caps, leaving out the program file. A walk that
// fails is reported in the Collection (Incomplete), not as an error: the
// run itself happened.
func CollectArtifacts(dir, programFile string, before artifacts.Snapshot, opts artifacts.Options) *artifacts.Collection {
	opts.Ignore = IgnoreProgram(programFile, opts.Ignore)
	c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, before, opts)
	if err != nil {
		if c == nil {
			c = &artifacts.Collection{}
		}
		c.Incomplete = "the working directory could not be read to the end (" + err.Error() + ")"
	}
	return c
}

// IgnoreProgram wraps ignore (artifacts.DefaultIgnore when nil) so that it
// also ignores the program file at the top of the working directory.
func IgnoreProgram(programFile string, ignore func(string, bool) bool) func(string, bool) bool {
	if ignore == nil {
		ignore = artifacts.DefaultIgnore
	}
	return func(p string, isDir bool) bool {
		return (!isDir && p == programFile) || ignore(p, isDir)
	}
}
