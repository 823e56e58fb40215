package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The go-sdk client, like any Go JSON encoder, cannot send invalid UTF-8
// in a string: it sends this marker, and the tests replace it on the wire
// with the raw bytes C3 28 FF FE.
const utf8Marker = "@@RAW-INVALID-UTF8@@"

var invalidUTF8 = []byte{0xC3, 0x28, 0xFF, 0xFE}

func withInvalidUTF8(b []byte) []byte {
	return bytes.ReplaceAll(b, []byte(utf8Marker), invalidUTF8)
}

// invalidUTF8Transport puts the raw bytes into HTTP request bodies.
type invalidUTF8Transport struct{ next http.RoundTripper }

func (t invalidUTF8Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil {
		return t.next.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	body = withInvalidUTF8(body)
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return t.next.RoundTrip(r)
}

// invalidUTF8Writer puts the raw bytes into the messages written to the
// server's stdin (the go-sdk writes one whole message per Write).
type invalidUTF8Writer struct{ io.WriteCloser }

func (w invalidUTF8Writer) Write(p []byte) (int, error) {
	if _, err := w.WriteCloser.Write(withInvalidUTF8(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// connectStdioRaw starts the binary on stdio and connects the go-sdk
// client through the invalid-UTF-8 writer.
func connectStdioRaw(t *testing.T, env map[string]string) (*mcp.ClientSession, *lockedBuffer) {
	t.Helper()
	cmd, stdin, stdout, stderr := startRawStdio(t, env)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("codeexec (stdio) stderr:\n%s", stderr.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := newClient().Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: invalidUTF8Writer{stdin}}, nil)
	if err != nil {
		t.Fatalf("connecting over stdio: %v; stderr:\n%s", err, stderr.String())
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, stderr
}

// TestInvalidUTF8Rejected: a tools/call whose code carries raw invalid
// UTF-8 is rejected with a JSON-RPC parse error that says why, on every
// transport and protocol version, the code does not run (not even with
// the bytes replaced), and the server answers the next request.
func TestInvalidUTF8Rejected(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ transport, version string }{
		{stdio, ""},
		{sse, ""},
		{http_, "2025-06-18"},
		{http_, "2026-07-28"},
	} {
		t.Run(c.transport+" "+c.version, func(t *testing.T) {
			t.Parallel()
			env := serverEnv(t, nil)
			var (
				cs     *mcp.ClientSession
				stderr interface{ String() string }
			)
			if c.transport == stdio {
				cs, stderr = connectStdioRaw(t, env)
			} else {
				s := startHTTP(t, c.transport, env)
				cs = dial(t, s, connectOpts{protocolVersion: c.version, wrapHTTP: func(rt http.RoundTripper) http.RoundTripper { return invalidUTF8Transport{rt} }})
				stderr = s.stderr
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
				"language": "python", "code": "print('altered:', '" + utf8Marker + "')",
			}})
			switch {
			case err != nil:
				if !strings.Contains(err.Error(), "not valid UTF-8") {
					t.Errorf("the error does not say why: %v", err)
				}
			case res.IsError:
				if !strings.Contains(text(res), "not valid UTF-8") {
					t.Errorf("the error result does not say why: %q", text(res))
				}
			default:
				t.Fatalf("a call with invalid UTF-8 ran: %q", text(res))
			}
			checkExample(t, cs, "process")
			// The run's log line is written after its response is sent:
			// wait for it (a bounded wait), then count.
			waitFor(t, eventWait, "the run's log line", func() bool { return strings.Contains(stderr.String(), `"msg":"run"`) })
			logs := stderr.String()
			if strings.Contains(logs, "altered:") || strings.Count(logs, `"msg":"run"`) != 1 {
				t.Errorf("the server ran something other than the example:\n%s", logs)
			}
			if !strings.Contains(logs, "not valid UTF-8") {
				t.Errorf("the server did not log the rejection:\n%s", logs)
			}
		})
	}
}
