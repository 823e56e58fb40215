//go:build !unix

package packages

import "os"

func checkOwned(os.FileInfo, string) error { return nil }
