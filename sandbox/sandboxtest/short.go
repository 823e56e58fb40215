package sandboxtest

import "testing"

// What the tests that `go test -short` (the fast loop, docs/development.md)
// skips need, for SkipShort.
const (
	NeedsDocker     = "needs the Docker Engine"
	NeedsKubernetes = "needs a Kubernetes cluster"
	NeedsBrowser    = "needs Chromium"
	NeedsInstallers = "runs the real pip and npm"
)

// SkipShort skips t under -short, saying why ("-short: needs the Docker
// Engine"). The helpers that connect a test to what it needs call it first,
// before they look at CODE_EXEC_REQUIRE_*: CI does not pass -short, so a
// part it requires is never skipped there, and -short never turns a missing
// part into a failure either.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
}
