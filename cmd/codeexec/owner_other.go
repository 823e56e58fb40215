//go:build !unix

package main

import "io/fs"

// ownedByMe cannot tell the owner here; the file's mode is checked alone.
func ownedByMe(fs.FileInfo) bool { return true }
