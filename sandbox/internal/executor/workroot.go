package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// WorkRoot is the directory that holds the run directories of one server.
// A lock file inside it is held (TryLock) for as long as the server lives, so
// that the next server to start can tell the work roots of servers that died
// without cleaning up (SIGKILL, a crash, a power cut) and remove them.
type WorkRoot struct {
	Dir  string
	lock *os.File
}

const lockName = ".codeexec.lock"

// NewWorkRoot creates a work root named prefix* in base ("" means the system
// temporary directory), with mode, after removing the work roots with the
// same prefix that a dead server left in base.
func NewWorkRoot(base, prefix string, mode os.FileMode, log *slog.Logger) (*WorkRoot, error) {
	if base == "" {
		base = os.TempDir()
	}
	sweepWorkRoots(base, prefix, log)
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return nil, fmt.Errorf("creating the work root in %s: %w", base, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o600)
	if err == nil {
		err = TryLock(lock)
	}
	if err == nil {
		err = os.Chmod(dir, mode)
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating the work root: %w", err)
	}
	return &WorkRoot{Dir: dir, lock: lock}, nil
}

// Remove releases the work root's lock and deletes it (Windows deletes no
// open file). Safe to call twice.
func (w *WorkRoot) Remove() error {
	if w.lock != nil {
		w.lock.Close()
		w.lock = nil
	}
	return RemoveAll(w.Dir)
}

// sweepWorkRoots removes the work roots in base whose lock no live server
// holds. A directory without a lock file is not codeexec's to judge and is
// left alone.
func sweepWorkRoots(base, prefix string, log *slog.Logger) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		err = TryLock(f)
		if errors.Is(err, ErrLocked) {
			f.Close() // a live server holds it
			continue
		}
		if err == nil {
			// Everything but the lock file while it is held, then the
			// rest once it is closed (Windows deletes no open file).
			rerr := removeAllBut(dir, lockName)
			f.Close()
			if rerr == nil {
				rerr = RemoveAll(dir)
			}
			if rerr != nil && log != nil {
				log.Warn("could not remove the work root of a server that died", "dir", dir, "err", rerr)
			} else if log != nil {
				log.Info("removed the work root of a server that died", "dir", dir)
			}
			continue
		}
		f.Close()
	}
}

// removeAllBut removes what dir holds except the entry named keep.
func removeAllBut(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == keep {
			continue
		}
		if err := RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// ErrLocked says that TryLock found the file locked by another open file.
var ErrLocked = errors.New("the file is locked by another process")
