//go:build !linux

package process

// FindHelper finds no run helper: process mode starts its run core only
// on Linux (elsewhere runs start their programs directly).
func FindHelper(exe string) (path, why string) { return "", "" }
