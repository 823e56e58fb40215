package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// outputOmission is structuredContent's stdout_omitted or stderr_omitted.
type outputOmission struct {
	Bytes int    `json:"bytes"`
	Lines int    `json:"lines"`
	URI   string `json:"uri"`
}

// TestLongOutputIsSummarised: a run that prints far more than a model should
// read comes back, in the text content and in structuredContent alike, as
// the head and the tail of its output with a line that says how much was
// left out and where the whole is; resources/read of the resource_link
// returns the whole output to the client that ran the code, and to no
// other: not to another MCP session (protocol 2025-11-25), nor to another
// principal (2026-07-28, which has no sessions).
func TestLongOutputIsSummarised(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "principals.yaml")
	ownToken, otherToken := "own-"+newSecret(t), "other-"+newSecret(t)
	principalsFile(t, file, ownToken, otherToken, "")
	s := startHTTP(t, http_, serverEnv(t, map[string]string{"CODE_EXEC_PRINCIPALS_FILE": file}))
	for _, c := range []struct {
		version string
		others  map[string]connectOpts // who must not read the output
	}{
		{"2025-11-25", map[string]connectOpts{
			"another session of the same principal": {token: ownToken, protocolVersion: "2025-11-25"},
			"another principal":                     {token: otherToken, protocolVersion: "2025-11-25"},
		}},
		{"2026-07-28", map[string]connectOpts{
			"another principal": {token: otherToken, protocolVersion: "2026-07-28"},
		}},
	} {
		t.Run(c.version, func(t *testing.T) {
			cs := dial(t, s, connectOpts{token: ownToken, protocolVersion: c.version})
			uri := checkLongOutput(t, cs)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for who, o := range c.others {
				other := dial(t, s, o)
				if rr, err := other.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
					t.Errorf("%s read %s: %d contents", who, uri, len(rr.Contents))
				} else if !strings.Contains(err.Error(), "not found") {
					t.Errorf("%s reading %s: %v, want not found", who, uri, err)
				}
			}
		})
	}
}

// checkLongOutput runs a program that prints 20000 lines on cs, checks that
// the result summarises them and that resources/read serves the whole, and
// returns the whole output's URI.
func checkLongOutput(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	const n = 20000
	want := sandboxtest.NumberedLines(n)
	res := call(t, cs, "code_execute", map[string]any{"language": "python",
		"code": fmt.Sprintf("import sys\nfor i in range(1, %d):\n    print(f'line {i:05d}')\nprint('a warning', file=sys.stderr)", n+1)})
	out := decodeExec(t, res) // as sent, not execute's whole output
	txt := text(res)
	if res.IsError || out.ExitCode != 0 || out.Stderr != "a warning\n" || out.StderrOmitted != nil {
		t.Fatalf("isError=%v exit=%d stderr=%q stderr_omitted=%+v, want a plain run whose short stderr is whole", res.IsError, out.ExitCode, out.Stderr, out.StderrOmitted)
	}
	if !strings.Contains(txt, "line 00001\n") || !strings.Contains(txt, "line 20000\n") || strings.Contains(txt, "line 10000") || len(txt) > 16<<10 {
		t.Errorf("the text content (%d bytes) should show the first and the last lines and leave out the middle: %s", len(txt), abbrev(txt))
	}
	if len(out.Stdout) > 9<<10 || !strings.Contains(txt, out.Stdout) {
		t.Errorf("structuredContent.stdout (%d bytes) should be what the text shows, bounded: %s", len(out.Stdout), abbrev(out.Stdout))
	}
	om := out.StdoutOmitted
	if om == nil || !strings.HasPrefix(om.URI, "codeexec://runs/") || om.Bytes < len(want)-9<<10 || om.Lines < n-1000 {
		t.Fatalf("stdout_omitted = %+v, want the bytes and lines left out and a codeexec:// URI", om)
	}
	if !strings.Contains(txt, fmt.Sprintf("%d bytes (%d lines) of stdout left out", om.Bytes, om.Lines)) || !strings.Contains(txt, om.URI) {
		t.Errorf("the text does not say how much was left out and where the whole is: %s", abbrev(txt))
	}
	var link *mcp.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok && l.URI == om.URI {
			link = l
		}
	}
	if link == nil || link.Name != "stdout" || link.MIMEType != "text/plain" || link.Size == nil || *link.Size != int64(len(want)) {
		t.Errorf("resource_link to %s: %+v, want one named stdout, text/plain, of %d bytes; contents %+v", om.URI, link, len(want), res.Content)
	}
	if got := wholeOutput(t, cs, "stdout", out.Stdout, om); got != want {
		t.Errorf("resources/read %s: %d bytes, want the whole stdout (%d bytes): %s", om.URI, len(got), len(want), abbrev(got))
	}
	return om.URI
}
