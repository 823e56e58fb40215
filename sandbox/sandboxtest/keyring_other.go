//go:build !linux

package sandboxtest

import "errors"

var errNoKeyrings = errors.New("kernel keyrings need Linux")

// InSessionKeyring does nothing outside Linux.
func InSessionKeyring() {}

// SessionKeyringAvailable reports false outside Linux.
func SessionKeyringAvailable() bool { return false }

// PlantKey fails outside Linux.
func PlantKey(desc, payload string) (func(), error) { return nil, errNoKeyrings }

// KeyPlanted reports false outside Linux.
func KeyPlanted(desc string) bool { return false }

// ODirectory is 0: InheritableFiles sets up nothing outside Linux.
const ODirectory = 0

// InheritableFiles is not supported outside Linux.
func InheritableFiles(paths []string, flags []int) (func(), error) {
	return nil, errors.New("inheritable test descriptors are only set up on Linux")
}
