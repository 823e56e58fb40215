package executor

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/codeexec/codeexec/sandbox"
)

// RunDir is a fresh directory for one run, holding the program file.
type RunDir struct {
	Dir, File string
	log       *slog.Logger
}

// NewRunDir makes a run directory in root and writes code to fileName in it
// with mode perm. Remove deletes it.
func NewRunDir(root, fileName, code string, perm os.FileMode, log *slog.Logger) (*RunDir, error) {
	dir, err := os.MkdirTemp(root, "run-")
	if err != nil {
		return nil, fmt.Errorf("%w: creating the run directory: %v", sandbox.ErrSandboxUnavailable, err)
	}
	rd := &RunDir{Dir: dir, File: filepath.Join(dir, fileName), log: log}
	if err := os.WriteFile(rd.File, []byte(code), perm); err != nil {
		rd.Remove()
		return nil, fmt.Errorf("%w: writing the program: %v", sandbox.ErrSandboxUnavailable, err)
	}
	return rd, nil
}

// Remove deletes the run directory, logging a failure.
func (rd *RunDir) Remove() {
	if err := RemoveAll(rd.Dir); err != nil && rd.log != nil {
		rd.log.Error("could not remove a run directory", "dir", rd.Dir, "err", err)
	}
}

// RemoveAll removes a work directory even when the program made parts of it
// unreadable or unwritable.
func RemoveAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
