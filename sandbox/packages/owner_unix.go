//go:build unix

package packages

import (
	"fmt"
	"os"
	"syscall"
)

// checkOwned refuses a cache folder that another user owns or may write:
// its entries are mounted into runs.
func checkOwned(fi os.FileInfo, dir string) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("packages cache: %s belongs to uid %d, not to this server's user (uid %d): choose another CODE_EXEC_PACKAGES_CACHE_DIR", dir, st.Uid, os.Geteuid())
	}
	return nil
}
