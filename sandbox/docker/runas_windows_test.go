//go:build windows

package docker

import "testing"

// runAsUser needs Unix: the engine's socket test it serves is about a Unix
// socket's permissions.
func runAsUser(t *testing.T, id uint32) string {
	t.Skip("running as another user needs Unix")
	return ""
}
