package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// startSleep calls code_execute with a bash program that sleeps with marker
// as its argument, in a goroutine, and waits until the process runs. The
// call's outcome arrives on the returned channel.
func startSleep(t *testing.T, ctx context.Context, cs *mcp.ClientSession, marker string) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
			"language":        "bash",
			"code":            "sleep " + marker + "; echo finished",
			"timeout_seconds": 50,
		}})
		if err == nil && !res.IsError {
			err = fmt.Errorf("the run finished normally: %q", text(res))
		}
		errc <- err
	}()
	waitAlive(t, marker)
	return errc
}

// TestCancellation: cancelling the ctx of CallTool (the go-sdk then sends
// notifications/cancelled, and over HTTP also drops the request) kills the
// run, and the same session keeps working.
func TestCancellation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ transport, version string }{
		{stdio, ""}, // the go-sdk's newest version
		{stdio, "2025-11-25"},
		{sse, ""},
		{http_, "2025-11-25"},
		{http_, "2025-06-18"},
		{http_, "2026-07-28"},
	} {
		name := c.transport
		if c.version != "" {
			name += "/" + c.version
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The go-sdk sends notifications/cancelled in the background
			// (not on 2026-07-28 over HTTP, where the dropped request is the
			// cancellation: there the transport is not wrapped, as the
			// wrapper would hide how the go-sdk cancels).
			var sent *lockedBuffer
			o := connectOpts{protocolVersion: c.version}
			if c.transport != http_ || c.version != "2026-07-28" {
				sent = &lockedBuffer{}
				o.sent = sent
			}
			cs, _ := connect(t, c.transport, serverEnv(t, nil), o)
			m := marker()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := startSleep(t, ctx, cs, m)
			cancel()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Logf("CallTool after cancel returned %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("CallTool did not return within 30 s of its ctx being cancelled")
			}
			waitGone(t, m)
			// Wait until the notification has been written (over HTTP:
			// answered), so that a rejection of it shows up here.
			if sent != nil {
				waitFor(t, time.Minute, "the client to send notifications/cancelled", func() bool {
					return strings.Contains(sent.String(), `"method":"notifications/cancelled"`)
				})
			}
			checkExample(t, cs, "process")
			checkExample(t, cs, "process")
		})
	}
}

// TestCancelWhileQueued: a call waiting for a run slot can be cancelled,
// and the slot is not lost.
func TestCancelWhileQueued(t *testing.T) {
	t.Parallel()
	sent := &lockedBuffer{}
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_MAX_CONCURRENCY": "1"}), connectOpts{sent: sent})
	m1 := marker()
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	errc1 := startSleep(t, ctx1, cs, m1)

	// The second call waits for the only slot; cancel it while it waits.
	m2 := marker()
	ctx2, cancel2 := context.WithCancel(context.Background())
	errc2 := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx2, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "bash", "code": "sleep " + m2}})
		errc2 <- err
	}()
	// Cancel it once it is on the server's stdin (the cancellation follows
	// it there); it must never start while the first holds the slot.
	waitFor(t, time.Minute, "the queued call to be sent", func() bool {
		return strings.Contains(sent.String(), `"code":"sleep `+m2+`"`)
	})
	cancel2()
	select {
	case <-errc2:
	case <-time.After(30 * time.Second):
		t.Fatalf("the queued call did not return after its cancellation")
	}
	cancel1()
	select {
	case <-errc1:
	case <-time.After(30 * time.Second):
		t.Fatalf("the running call did not return after its cancellation")
	}
	waitGone(t, m1)
	if alive(m2) {
		t.Errorf("the cancelled queued call started anyway")
	}
	checkExample(t, cs, "process")
}

// TestSSEDisconnect: an SSE client that goes away (its event stream drops)
// takes its runs with it. (ClientSession.Close would not do: the go-sdk
// waits for calls in flight before it closes the stream.)
func TestSSEDisconnect(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, sse, serverEnv(t, nil))
	streamCtx, dropStream := context.WithCancel(context.Background())
	defer dropStream()
	cs := dial(t, s, connectOpts{ctx: streamCtx})
	m := marker()
	errc := startSleep(t, context.Background(), cs, m)
	dropStream()
	waitGone(t, m)
	select {
	case <-errc:
	case <-time.After(30 * time.Second):
		t.Errorf("CallTool did not return after its event stream dropped")
	}
	checkExample(t, dial(t, s, connectOpts{}), "process")
}

// rawMCP is a minimal streamable HTTP client over net/http, to control the
// connection that carries a tools/call.
type rawMCP struct {
	t       *testing.T
	url     string
	session string
	version string
}

func (c *rawMCP) headers(h http.Header) {
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		h.Set("Mcp-Session-Id", c.session)
	}
	if c.version != "" {
		h.Set("Mcp-Protocol-Version", c.version)
	}
}

func (c *rawMCP) post(body string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	c.headers(req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", c.url, err)
	}
	return resp
}

// initialize opens a session with protocol 2025-06-18.
func (c *rawMCP) initialize() {
	c.t.Helper()
	resp := c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"protocolVersion":"2025-06-18"`)) {
		c.t.Fatalf("initialize: %s %s", resp.Status, body)
	}
	c.session = resp.Header.Get("Mcp-Session-Id")
	c.version = "2025-06-18"
	resp = c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		c.t.Fatalf("notifications/initialized: %s", resp.Status)
	}
}

// TestHTTPClientDisconnect: a streamable HTTP client whose connection goes
// away mid-run takes the run with it.
func TestHTTPClientDisconnect(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, http_, serverEnv(t, nil))
	c := &rawMCP{t: t, url: s.baseURL + "/mcp"}
	c.initialize()

	m := marker()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"bash","code":"sleep %s","timeout_seconds":50}}}`, m)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	c.headers(req.Header)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, m)
	conn.Close()
	waitGone(t, m)

	// The server, and even the same session, keep working.
	resp := c.post(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"print(2**64)"}}}`)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(out, []byte(`18446744073709551616`)) {
		t.Errorf("the next call on the same session: %s %s", resp.Status, out)
	}
	checkExample(t, dial(t, s, connectOpts{}), "process")
}

// TestStdioClientGoesAway: a stdio client that closes the server's stdin
// mid-run (a client that quits) ends the run and the server, which exits 0
// and leaves nothing behind.
func TestStdioClientGoesAway(t *testing.T) {
	t.Parallel()
	env := serverEnv(t, nil)
	cmd, stdin, stdout, stderr := startRawStdio(t, env)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("codeexec stderr:\n%s", stderr.String())
		}
	})
	cs, err := newClient().Connect(context.Background(), &mcp.IOTransport{Reader: stdout, Writer: nopCloser{stdin}}, nil)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	m := marker()
	startSleep(t, context.Background(), cs, m)
	stdin.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the server did not exit cleanly when its stdin closed: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the server did not exit within 30 s of its stdin closing, with a run in flight")
	}
	waitGone(t, m)
	assertNoRunDirs(t, env["CODE_EXEC_WORK_DIR"])
}

// nopCloser keeps the go-sdk from closing stdin itself.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// barrier is a bash program (mode none: runs share the filesystem) that
// marks itself present in dir and waits, up to about 20 s, until n runs are
// present at once, then prints ok.
func barrier(dir string, id, n int) string {
	return fmt.Sprintf(`d=%q
touch "$d/present.%d"
for i in $(seq 400); do
  c=$(ls "$d" | grep -c '^present\.')
  if [ "$c" -ge %d ]; then echo ok; exit 0; fi
  sleep 0.05
done
echo "only $c of %d runs were running at once"; exit 1`, dir, id, n, n)
}

// TestConcurrencyEight: with CODE_EXEC_MAX_CONCURRENCY=8, eight calls over
// one session all run at once: no transport throttles below the limit (the
// stdio transport of mcp-go has a worker pool that must be big enough).
func TestConcurrencyEight(t *testing.T) {
	t.Parallel()
	for _, transport := range allTransports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			cs, _ := connect(t, transport, serverEnv(t, map[string]string{"CODE_EXEC_SANDBOX": "none", "CODE_EXEC_MAX_CONCURRENCY": "8"}), connectOpts{})
			dir := t.TempDir()
			var wg sync.WaitGroup
			results := make([]string, 8)
			for i := range 8 {
				wg.Go(func() {
					results[i] = callOutcome(t, cs, barrier(dir, i, 8))
				})
			}
			wg.Wait()
			for i, r := range results {
				if r != "ok" {
					t.Errorf("call %d: %q, want ok (all 8 should run at once)", i, r)
				}
			}
		})
	}
}

// callOutcome runs bash code with a 40 s timeout and returns its trimmed
// stdout, or a description of what went wrong.
func callOutcome(t *testing.T, cs *mcp.ClientSession, code string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "bash", "code": code, "timeout_seconds": 40}})
	switch {
	case err != nil:
		return "error: " + err.Error()
	case res.IsError:
		return "isError: " + text(res)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return "bad structuredContent: " + err.Error()
	}
	var out execResult
	if err := json.Unmarshal(b, &out); err != nil {
		return "bad structuredContent: " + err.Error()
	}
	return strings.TrimSpace(out.Stdout)
}

// TestConcurrencyLimit: with CODE_EXEC_MAX_CONCURRENCY=2, three calls never
// run three at once, and two do run together.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_SANDBOX": "none", "CODE_EXEC_MAX_CONCURRENCY": "2"}), connectOpts{})
	dir := t.TempDir()
	// Each run is present (active.ID exists) only while it runs. It waits
	// until a second run is present or one has finished (done.*), looks
	// again a little later, and reports the most runs it saw at once.
	prog := func(id int) string {
		return fmt.Sprintf(`d=%q
touch "$d/active.%[2]d"
max=0
look() { c=$(ls "$d" | grep -c '^active\.'); if [ "$c" -gt "$max" ]; then max=$c; fi; }
for i in $(seq 400); do
  look
  if [ "$c" -ge 2 ] || ls "$d" | grep -q '^done\.'; then break; fi
  sleep 0.05
done
sleep 0.3; look
rm "$d/active.%[2]d"; touch "$d/done.%[2]d"
echo "max=$max"`, dir, id)
	}
	var wg sync.WaitGroup
	results := make([]string, 3)
	for i := range 3 {
		wg.Go(func() { results[i] = callOutcome(t, cs, prog(i)) })
	}
	wg.Wait()
	sawTwo := false
	for i, r := range results {
		switch r {
		case "max=1":
		case "max=2":
			sawTwo = true
		default:
			t.Errorf("call %d: %q, want max=1 or max=2 (at most 2 runs at once)", i, r)
		}
	}
	if !sawTwo {
		t.Errorf("no run saw another one running: %q (the limit is 2, not 1)", results)
	}
}

// assertNoRunDirs checks that the server left nothing in its work dir.
func assertNoRunDirs(t *testing.T, dir string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(dir, "codeexec-*"))
	if len(left) > 0 {
		var all []string
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
			all = append(all, p)
			return nil
		})
		t.Errorf("the server left run directories behind in %s: %q", dir, all)
	}
}

// TestSignalWithRunInFlight: SIGTERM and SIGINT stop the server with exit
// code 0, kill the run in flight and remove its directories.
func TestSignalWithRunInFlight(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		transport string
		sig       syscall.Signal
	}{
		{http_, syscall.SIGTERM},
		{sse, syscall.SIGTERM},
		{stdio, syscall.SIGTERM},
		{http_, syscall.SIGINT},
	} {
		t.Run(c.transport+"/"+c.sig.String(), func(t *testing.T) {
			t.Parallel()
			env := serverEnv(t, nil)
			cs, s := connect(t, c.transport, env, connectOpts{})
			m := marker()
			errc := startSleep(t, context.Background(), cs, m)
			if err := s.cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			if c.transport == stdio {
				waitZombie(t, s.cmd.Process.Pid, 30*time.Second)
				_ = cs.Close() // reaps the server
				if code := s.cmd.ProcessState.ExitCode(); code != 0 {
					t.Errorf("exit code %d after %s, want 0", code, c.sig)
				}
			} else if code := s.waitExit(t, 30*time.Second); code != 0 {
				t.Errorf("exit code %d after %s, want 0", code, c.sig)
			}
			waitGone(t, m)
			assertNoRunDirs(t, env["CODE_EXEC_WORK_DIR"])
			select {
			case <-errc:
			case <-time.After(30 * time.Second):
				t.Errorf("the call in flight never returned after the server stopped")
			}
		})
	}
}

// waitZombie waits until pid has exited (it stays a zombie until reaped).
func waitZombie(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	if err := sandboxtest.WaitExited(pid, d); err != nil {
		t.Fatalf("the server (pid %d): %v", pid, err)
	}
}

// TestStdoutIsProtocolOnly speaks raw JSON-RPC over stdio and checks that
// every line on the server's stdout is a JSON-RPC message, even while
// programs write to their own stdout and the server logs at debug level.
func TestStdoutIsProtocolOnly(t *testing.T) {
	t.Parallel()
	env := serverEnv(t, map[string]string{"CODE_EXEC_LOG_FORMAT": "text"})
	cmd, stdin, stdout, stderr := startRawStdio(t, env)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("codeexec stderr:\n%s", stderr.String())
		}
	})

	type message struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	responses := make(chan message, 100)
	readDone := make(chan []string, 1)
	go func() {
		var bad []string
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 4<<20), 4<<20)
		for sc.Scan() {
			var m message
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.JSONRPC != "2.0" {
				bad = append(bad, sc.Text())
				continue
			}
			if len(m.ID) > 0 && m.Method == "" {
				responses <- m
			}
		}
		readDone <- bad
	}()

	send := func(msg string) {
		if _, err := io.WriteString(stdin, msg+"\n"); err != nil {
			t.Fatalf("writing to the server: %v", err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"bash","code":"echo to-stdout; echo to-stderr >&2; printf 'no newline'"}}}`)
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"import os\nos.write(1, b'{\"jsonrpc\": \"fake\"}\\n')\nprint('x' * 100000)"}}}`)
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"cobol","code":"x"}}}`)
	send(`{"jsonrpc":"2.0","id":6,"method":"ping"}`)
	// Arguments that are not an object at all.
	send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"code_execute","arguments":["python","print(1)"]}}`)
	send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"code_execute","arguments":"print(1)"}}`)
	send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":"print(2**64)"}}}`)

	got := map[string]message{}
	deadline := time.After(time.Minute)
	for len(got) < 9 {
		select {
		case m := <-responses:
			got[string(m.ID)] = m
		case <-deadline:
			t.Fatalf("only %d of 9 responses arrived: %v", len(got), keys(got))
		}
	}
	stdin.Close()
	var bad []string
	select {
	case bad = <-readDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("the server did not close stdout within 30 s of its stdin closing")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the server did not exit cleanly when stdin closed: %v", err)
	}
	for _, l := range bad {
		t.Errorf("stdout has a line that is not a JSON-RPC message: %q", abbrev(l))
	}
	for id, m := range got {
		if len(m.Error) > 0 && id != "7" && id != "8" {
			t.Errorf("response %s is an error: %s", id, m.Error)
		}
	}
	// Arguments that are not an object are rejected, as a tool error or
	// as invalid params, never run.
	for _, id := range []string{"7", "8"} {
		m := got[id]
		var r struct {
			IsError bool `json:"isError"`
		}
		_ = json.Unmarshal(m.Result, &r)
		if len(m.Error) == 0 && !r.IsError {
			t.Errorf("call %s with non-object arguments was not rejected: %s", id, m.Result)
		}
	}
	if !bytes.Contains(got["9"].Result, []byte(`"stdout":"18446744073709551616\n"`)) {
		t.Errorf("call 9 after the bad ones: %s", abbrev(string(got["9"].Result)))
	}

	// The annotations on the wire set every hint explicitly.
	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			Annotations map[string]any `json:"annotations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(got["2"].Result, &list); err != nil {
		t.Fatalf("tools/list result: %v", err)
	}
	if len(list.Tools) < 2 {
		t.Errorf("tools/list has %d tools, want at least 2", len(list.Tools))
	}
	for _, tool := range list.Tools {
		for _, k := range []string{"title", "readOnlyHint", "destructiveHint", "openWorldHint"} {
			if _, ok := tool.Annotations[k]; !ok {
				t.Errorf("tool %s: annotations on the wire do not set %s: %v", tool.Name, k, tool.Annotations)
			}
		}
	}
	var res3 struct {
		Structured execResult `json:"structuredContent"`
	}
	if err := json.Unmarshal(got["3"].Result, &res3); err != nil || res3.Structured.Stdout != "to-stdout\nno newline" || res3.Structured.Stderr != "to-stderr\n" {
		t.Errorf("call 3: %s", abbrev(string(got["3"].Result)))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestHTTPModernNotificationWithoutMeta: under protocol 2026-07-28 the
// go-sdk client sends notifications/cancelled with the Mcp-Protocol-Version
// header but without params._meta (the _meta triple is defined for
// requests; the go-sdk's own server exempts notifications). The server must
// accept it: a 400 makes the go-sdk client close the whole session (see
// TestCancellation/http/2026-07-28).
func TestHTTPModernNotificationWithoutMeta(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, http_, serverEnv(t, nil))
	c := &rawMCP{t: t, url: s.baseURL + "/mcp", version: "2026-07-28"}
	resp := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"context canceled"}}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Errorf("notifications/cancelled without _meta under 2026-07-28: %s %s, want 202 Accepted", resp.Status, bytes.TrimSpace(body))
	}
}

// startRawStdio starts the binary on stdio without a client, for tests that
// speak JSON-RPC by hand; the caller waits for or kills cmd.
func startRawStdio(t *testing.T, env map[string]string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, *lockedBuffer) {
	t.Helper()
	cmd := execCommand(binPath)
	cmd.Env = envList(env)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout, stderr
}
