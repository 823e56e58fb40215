//go:build unix

package main

import (
	"io/fs"
	"os"
	"syscall"
)

// ownedByMe reports whether this process's user owns fi's file.
func ownedByMe(fi fs.FileInfo) bool {
	uid, ok := ownerOf(fi)
	return ok && uid == os.Geteuid()
}

// ownerOf returns the user id that owns fi's file.
func ownerOf(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
