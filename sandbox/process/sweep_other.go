//go:build !linux

package process

// sweepUser does nothing outside Linux, where runs never have host users
// of their own.
func sweepUser(uid int) {}
