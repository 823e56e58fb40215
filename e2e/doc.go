// Package e2e is codeexec's end-to-end suite: it builds the real binary,
// starts it over stdio, SSE and streamable HTTP, and drives it with the
// official MCP Go SDK client, so that the server is checked by an
// implementation that is not its own. Everything lives in the _test files;
// run it with
//
//	go test ./e2e/ -count=1
//
// and regenerate the tools/list snapshot with
//
//	go test ./e2e/ -run TestToolsSnapshot -update
//
// To test a binary built elsewhere instead of building one, set
// CODE_EXEC_E2E_BINARY to its path (build it with
// -ldflags "-X main.version=0.0.0-e2e" so that the snapshot matches).
package e2e
