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
// before, within opts' caps, leaving out the program file (none when
// programFile is "", as in a session's directory). A walk that
// fails is reported in the Collection (Incomplete), not as an error: the
// run itself happened.
func CollectArtifacts(dir, programFile string, before artifacts.Snapshot, opts artifacts.Options) *artifacts.Collection {
	opts.Ignore = artifacts.IgnoreProgram(programFile, opts.Ignore)
	c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, before, opts)
	if err != nil {
		if c == nil {
			c = &artifacts.Collection{}
		}
		c.Incomplete = "the working directory could not be read to the end (" + err.Error() + ")"
	}
	return c
}

// CollectSpec asks the supervisor for the artifacts of a run whose run
// directory is private to it (a tmpfs in its mount namespace, gone when the
// run ends): the supervisor records the directory before the program starts
// and, after every process of the run is gone, collects what changed and
// reports it with the status. Options.Ignore cannot travel: the program
// file and artifacts.DefaultIgnore are what is ignored.
type CollectSpec struct {
	// ProgramFile is the program file's name in the run directory.
	ProgramFile string
	// Caps are artifacts.Options without Ignore.
	MaxArtifacts int
	MaxBytes     int64
	MaxEntries   int
	MaxDepth     int
	InlineText   int64
	InlineImage  int64
}

// NewCollectSpec is the CollectSpec of opts for the program file.
func NewCollectSpec(programFile string, opts artifacts.Options) *CollectSpec {
	return &CollectSpec{ProgramFile: programFile, MaxArtifacts: opts.MaxArtifacts, MaxBytes: opts.MaxBytes,
		MaxEntries: opts.MaxEntries, MaxDepth: opts.MaxDepth, InlineText: opts.InlineText, InlineImage: opts.InlineImage}
}

func (c *CollectSpec) options() artifacts.Options {
	return artifacts.Options{MaxArtifacts: c.MaxArtifacts, MaxBytes: c.MaxBytes, MaxEntries: c.MaxEntries, MaxDepth: c.MaxDepth,
		InlineText: c.InlineText, InlineImage: c.InlineImage, Ignore: artifacts.IgnoreProgram(c.ProgramFile, nil)}
}

// wireCollection is an artifacts.Collection as the supervisor reports it.
type wireCollection struct {
	Artifacts   []wireArtifact       `json:"artifacts,omitempty"`
	Omitted     []artifacts.Omission `json:"omitted,omitempty"`
	OmittedMore int                  `json:"omitted_more,omitempty"`
	Incomplete  string               `json:"incomplete,omitempty"`
}

type wireArtifact struct {
	Path     string         `json:"path"`
	MIMEType string         `json:"mime_type"`
	SHA256   string         `json:"sha256"`
	Kind     artifacts.Kind `json:"kind"`
	Data     []byte         `json:"data"`
}

func toWire(c *artifacts.Collection) *wireCollection {
	w := &wireCollection{Omitted: c.Omitted, OmittedMore: c.OmittedMore, Incomplete: c.Incomplete}
	for _, a := range c.Artifacts {
		w.Artifacts = append(w.Artifacts, wireArtifact{Path: a.Path, MIMEType: a.MIMEType, SHA256: a.SHA256, Kind: a.Kind, Data: a.Data})
	}
	return w
}

func (w *wireCollection) collection() *artifacts.Collection {
	c := &artifacts.Collection{Omitted: w.Omitted, OmittedMore: w.OmittedMore, Incomplete: w.Incomplete}
	for _, a := range w.Artifacts {
		c.Artifacts = append(c.Artifacts, artifacts.Artifact{Path: a.Path, Size: int64(len(a.Data)), MIMEType: a.MIMEType, SHA256: a.SHA256, Kind: a.Kind, Data: a.Data})
	}
	return c
}
