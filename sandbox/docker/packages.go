package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
)

// PackagesCachePath is where run containers see Config.PackagesCache.
const PackagesCachePath = runproto.PackagesCachePath

// packageEntry returns the name of pd's folder in Config.PackagesCache when
// pd is a read-only entry there, which every run container sees already
// (so that the run can take a warm container); "" otherwise. A writable pd
// (the install phase's) is handed to the container's user first.
func (r *Runner) packageEntry(pd *sandbox.PackageDir) (string, error) {
	switch {
	case pd == nil:
		return "", nil
	case pd.Writable:
		return "", r.preparePackageDir(pd)
	case r.cfg.PackagesCache != "" && filepath.Dir(filepath.Clean(pd.HostDir)) == filepath.Clean(r.cfg.PackagesCache):
		return filepath.Base(pd.HostDir), nil
	}
	return "", nil
}

// ifEntry is the package folder a cold container must bind itself: none
// when the run names an entry of the cache, which every container sees.
func ifEntry(entry string, pd *sandbox.PackageDir) *sandbox.PackageDir {
	if entry != "" {
		return nil
	}
	return pd
}

// poolFor takes a warm container for req, or returns nil when req must
// start a container of its own: warm containers have no package folder but
// the cache's entries, and no environment but the one every run has.
func (r *Runner) poolFor(lang string, req sandbox.Request, entry string) *session {
	if req.PackageDir != nil && entry == "" {
		return nil
	}
	if len(req.Env) > 0 {
		// A warm container was created before the run's own environment
		// (its token) existed.
		return nil
	}
	if s, ok := r.pool.Take(lang, req.Limits); ok {
		return s
	}
	return nil
}

// preparePackageDir hands a writable package folder (the install phase's)
// to the user that code runs as in the container, so that pip or npm can
// write into it; the packages layer takes it back when the install ends.
// The folder must be on the engine's host: the engine binds it by path.
func (r *Runner) preparePackageDir(pd *sandbox.PackageDir) error {
	if uid, err := strconv.Atoi(r.uid); err == nil && uid > 0 {
		if os.Chown(pd.HostDir, uid, uid) == nil {
			return nil
		}
	}
	// Not root: the folder is the server's, so let any user write into it
	// for the install (its parent, the cache folder, stays the server's).
	if err := os.Chmod(pd.HostDir, 0o777); err != nil {
		return fmt.Errorf("docker: %w: opening the package folder to the container's user: %v", sandbox.ErrSandboxUnavailable, err)
	}
	return nil
}
