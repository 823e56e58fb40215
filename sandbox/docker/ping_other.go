//go:build !unix

package docker

import "io/fs"

// fileOwner returns the ids of the user and the group that own a file:
// none here.
func fileOwner(fs.FileInfo) (uid, gid string, ok bool) { return "", "", false }
