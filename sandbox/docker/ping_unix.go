//go:build unix

package docker

import (
	"io/fs"
	"strconv"
	"syscall"
)

// fileOwner returns the ids of the user and the group that own a file.
func fileOwner(fi fs.FileInfo) (uid, gid string, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", "", false
	}
	return strconv.FormatUint(uint64(st.Uid), 10), strconv.FormatUint(uint64(st.Gid), 10), true
}
