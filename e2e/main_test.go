package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// binPath is the codeexec binary that TestMain builds.
var binPath string

// testVersion is the version the binary is built with.
const testVersion = "0.0.0-e2e"

const (
	secretName  = sandboxtest.SecretName
	secretValue = sandboxtest.SecretValue
)

// The transports, as the --transport flag names them.
const (
	stdio = "stdio"
	sse   = "sse"
	http_ = "http"
)

var allTransports = []string{stdio, sse, http_}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	// CODE_EXEC_E2E_BINARY runs the suite against a binary built elsewhere
	// (a release build, say) instead of building one. It must have been
	// built with -ldflags "-X main.version=0.0.0-e2e" for the snapshot.
	if bin := os.Getenv("CODE_EXEC_E2E_BINARY"); bin != "" {
		binPath = bin
		return m.Run()
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "codeexec-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The process sandbox re-executes this binary as its supervisor,
	// possibly as another user: keep it readable and executable by all.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	binPath = filepath.Join(dir, "codeexec")
	// A fixed version keeps the tools/list snapshot (whose _meta names the
	// server's version) independent of VCS stamping.
	build := exec.Command("go", "build", "-ldflags=-X main.version="+testVersion, "-o", binPath, "./cmd/codeexec")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building codeexec: %v\n%s", err, out)
		return 1
	}
	// Installed as the README says: process mode's run helper beside it.
	build = exec.Command("go", "build", "-o", filepath.Join(dir, "codeexec-sandbox"), "./cmd/codeexec-sandbox")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building codeexec-sandbox: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// moduleRoot finds the directory of go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// lockedBuffer is an io.Writer safe for concurrent use (a process's stderr).
type lockedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // made by a waiter, closed by the next Write
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.buf.Write(p)
}

// await waits until cond holds for the buffer's content, woken by each
// write (d only bounds a hang), or until stop is closed; it returns the
// content cond held for, or false.
func (b *lockedBuffer) await(cond func(string) bool, d time.Duration, stop <-chan struct{}) (string, bool) {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		b.mu.Lock()
		content := b.buf.String()
		if cond(content) {
			b.mu.Unlock()
			return content, true
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-stop:
			return "", false
		case <-timeout.C:
			return "", false
		}
	}
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serverEnv is a minimal environment for the server: PATH and HOME (for
// interpreter shims such as pyenv's), the test secret, a private work
// directory and JSON logs. Callers add or override settings.
func serverEnv(t *testing.T, extra map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{
		"PATH":                 os.Getenv("PATH"),
		"HOME":                 os.Getenv("HOME"),
		secretName:             secretValue,
		"CODE_EXEC_WORK_DIR":   workDir(t),
		"CODE_EXEC_LOG_FORMAT": "json",
		"CODE_EXEC_LOG_LEVEL":  "debug",
	}
	if os.Getenv("CODE_EXEC_TEST_NO_USERNS") == "1" && os.Geteuid() != 0 {
		// Without user namespaces an ordinary user's runs share its
		// process limit (RLIMIT_NPROC counts every process of the user):
		// the servers and runs of the tests beside one take from its
		// headroom as they start.
		env["CODE_EXEC_PIDS"] = "4096"
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// workDir makes a per-test directory for CODE_EXEC_WORK_DIR that the
// unprivileged user that runs code as root's sandbox can traverse.
func workDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// server is a codeexec process started by a test.
type server struct {
	t         *testing.T
	transport string
	cmd       *exec.Cmd
	stderr    *lockedBuffer
	stdout    *lockedBuffer
	baseURL   string // http://host:port for the sse and http transports
	workDir   string

	// done is closed when the process has exited and exitCode is set
	// (HTTP transports only: over stdio the SDK's CommandTransport waits).
	done     chan struct{}
	exitCode int
}

// waitLog reports whether the server's stderr holds substr within d: the
// pipe is copied into the buffer by a goroutine of os/exec, so a line the
// server wrote before answering may not be there yet. It wakes on each
// write; d only bounds a hang.
func (s *server) waitLog(substr string, d time.Duration) bool {
	_, ok := s.stderr.await(func(out string) bool { return strings.Contains(out, substr) }, d, nil)
	return ok
}

// logTail is the server's stderr for failure messages.
func (s *server) logTail() string {
	out := s.stderr.String()
	if len(out) > 12000 {
		out = "…" + out[len(out)-12000:]
	}
	return out
}

// startHTTP starts codeexec on an HTTP transport ("sse" or "http") with env,
// on a free loopback port unless args name an --addr, and waits until
// /healthz answers. The server is stopped at cleanup.
func startHTTP(t *testing.T, transport string, env map[string]string, args ...string) *server {
	t.Helper()
	argv := []string{"--transport", transport}
	if !containsArg(args, "--addr") {
		argv = append(argv, "--addr", "127.0.0.1:0")
	}
	argv = append(argv, args...)
	cmd := exec.Command(binPath, argv...)
	cmd.Env = envList(env)
	s := &server{t: t, transport: transport, cmd: cmd, stderr: &lockedBuffer{}, stdout: &lockedBuffer{}, workDir: env["CODE_EXEC_WORK_DIR"], done: make(chan struct{})}
	cmd.Stderr = s.stderr
	cmd.Stdout = s.stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting codeexec: %v", err)
	}
	go func() {
		_ = cmd.Wait()
		s.exitCode = cmd.ProcessState.ExitCode()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop()
		if out := s.stdout.String(); out != "" {
			t.Errorf("codeexec (%s) wrote to stdout, which is not for logs: %q", transport, abbrev(out))
		}
		if t.Failed() {
			t.Logf("codeexec (%s) stderr:\n%s", transport, s.logTail())
		}
	})

	// The server logs its address once it listens.
	out, ok := s.stderr.await(func(out string) bool { return listenAddr(out) != "" }, eventWait, s.done)
	if !ok {
		select {
		case <-s.done:
			t.Fatalf("codeexec exited with code %d before listening; stderr:\n%s", s.exitCode, s.logTail())
		default:
			t.Fatalf("codeexec did not log its listen address within %s; stderr:\n%s", eventWait, s.logTail())
		}
	}
	s.baseURL = "http://" + listenAddr(out)
	resp, err := http.Get(s.baseURL + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v; stderr:\n%s", err, s.logTail())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz answered %s once the server listened; stderr:\n%s", resp.Status, s.logTail())
	}
	return s
}

func containsArg(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// listenAddr finds the "listening" record in JSON logs.
func listenAddr(logs string) string {
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" && rec.Addr != "" {
			return rec.Addr
		}
	}
	return ""
}

// stop ends an HTTP server: SIGTERM, then SIGKILL if it lingers.
func (s *server) stop() {
	if s.done == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return
	case <-time.After(eventWait):
	}
	s.t.Errorf("codeexec did not exit within %s of SIGTERM; killing it", eventWait)
	_ = s.cmd.Process.Kill()
	<-s.done
}

// waitExit waits up to d for an HTTP server to exit and returns its code.
func (s *server) waitExit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
		return s.exitCode
	case <-time.After(d):
		t.Fatalf("codeexec did not exit within %s; stderr:\n%s", d, s.logTail())
		return -1
	}
}

// newClient is the go-sdk client every test uses.
func newClient() *mcp.Client { return newClientWith(connectOpts{}) }

// newClientWith is the go-sdk client with o's name and options.
func newClientWith(o connectOpts) *mcp.Client {
	name := o.clientName
	if name == "" {
		name = "codeexec-e2e"
	}
	return mcp.NewClient(&mcp.Implementation{Name: name, Version: "1.0.0"}, o.client)
}

// bearerTransport adds an Authorization header to every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connectOpts tune connect.
type connectOpts struct {
	protocolVersion string
	token           string // sent as a bearer token over HTTP
	// ctx, if set, bounds the session's transport: over SSE, cancelling
	// it drops the client's event stream, as a client that goes away does.
	ctx  context.Context
	args []string
	// client and clientName set the go-sdk client's handlers and name.
	client     *mcp.ClientOptions
	clientName string
	// wrapHTTP, if set, wraps the HTTP client's transport (sse and http).
	wrapHTTP func(http.RoundTripper) http.RoundTripper
	// sent, if set, receives a line "write: MESSAGE" for each message the
	// client has sent (once it is written: over HTTP, once the server has
	// answered the POST), or "write error: ..." (mcp.LoggingTransport).
	sent io.Writer
}

// logged wraps tr in an mcp.LoggingTransport when o.sent is set.
func (o connectOpts) logged(tr mcp.Transport) mcp.Transport {
	if o.sent == nil {
		return tr
	}
	return &mcp.LoggingTransport{Transport: tr, Writer: o.sent}
}

// connect starts codeexec on transport with env and connects the go-sdk
// client to it. The session and the server end at cleanup.
func connect(t *testing.T, transport string, env map[string]string, o connectOpts) (*mcp.ClientSession, *server) {
	t.Helper()
	// The SSE client's stream lives in the context given to Connect, so
	// it must last as long as the session: cancel it only at cleanup.
	parent := o.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	t.Cleanup(cancel)
	var sessOpts *mcp.ClientSessionOptions
	if o.protocolVersion != "" {
		sessOpts = &mcp.ClientSessionOptions{ProtocolVersion: o.protocolVersion}
	}
	var (
		s  *server
		tr mcp.Transport
	)
	switch transport {
	case stdio:
		cmd := exec.Command(binPath, o.args...)
		cmd.Env = envList(env)
		s = &server{t: t, transport: transport, cmd: cmd, stderr: &lockedBuffer{}, workDir: env["CODE_EXEC_WORK_DIR"]}
		cmd.Stderr = s.stderr
		tr = &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}
		t.Cleanup(func() {
			if cmd.Process != nil {
				// The session's Close normally ends the server by
				// closing its stdin; this is the last resort.
				_ = cmd.Process.Kill()
			}
			if t.Failed() {
				t.Logf("codeexec (stdio) stderr:\n%s", s.logTail())
			}
		})
	case sse, http_:
		s = startHTTP(t, transport, env, o.args...)
		return dial(t, s, o), s
	default:
		t.Fatalf("unknown transport %q", transport)
	}
	cs, err := newClientWith(o).Connect(ctx, o.logged(tr), sessOpts)
	if err != nil {
		t.Fatalf("connecting over %s: %v; stderr:\n%s", transport, err, s.logTail())
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, s
}

// dialErr opens a new go-sdk session to a running HTTP server.
func dialErr(t *testing.T, s *server, o connectOpts) (*mcp.ClientSession, error) {
	t.Helper()
	parent := o.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	t.Cleanup(cancel)
	var sessOpts *mcp.ClientSessionOptions
	if o.protocolVersion != "" {
		sessOpts = &mcp.ClientSessionOptions{ProtocolVersion: o.protocolVersion}
	}
	var rt http.RoundTripper = http.DefaultTransport
	if o.token != "" {
		rt = bearerTransport{token: o.token, next: rt}
	}
	if o.wrapHTTP != nil {
		rt = o.wrapHTTP(rt)
	}
	hc := &http.Client{Transport: rt}
	var tr mcp.Transport
	if s.transport == sse {
		tr = &mcp.SSEClientTransport{Endpoint: s.baseURL + "/sse", HTTPClient: hc}
	} else {
		tr = &mcp.StreamableClientTransport{Endpoint: s.baseURL + "/mcp", HTTPClient: hc}
	}
	cs, err := newClientWith(o).Connect(ctx, o.logged(tr), sessOpts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, nil
}

// dial is dialErr that fails the test on an error.
func dial(t *testing.T, s *server, o connectOpts) *mcp.ClientSession {
	t.Helper()
	cs, err := dialErr(t, s, o)
	if err != nil {
		t.Fatalf("connecting over %s: %v; stderr:\n%s", s.transport, err, s.logTail())
	}
	return cs
}

// execResult is code_execute's structuredContent.
type execResult struct {
	ExitCode   int     `json:"exit_code"`
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	TimedOut   bool    `json:"timed_out"`
	OOMKilled  bool    `json:"oom_killed"`
	Truncated  bool    `json:"truncated"`
	DurationMS float64 `json:"duration_ms"`
	Sandbox    string  `json:"sandbox"`
	Language   string  `json:"language"`
	Signal     string  `json:"signal"`
	// StdoutOmitted and StderrOmitted are set when the result summarised
	// a long output.
	StdoutOmitted *outputOmission `json:"stdout_omitted"`
	StderrOmitted *outputOmission `json:"stderr_omitted"`
	Packages      *struct {
		List   []string `json:"list"`
		Cached bool     `json:"cached"`
	} `json:"packages"`
}

// call calls a tool and fails the test on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // bounds a hang only
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s, %v): %v", tool, abbrev(fmt.Sprint(args)), err)
	}
	return res
}

// execute calls code_execute and decodes its structuredContent, which it
// requires. Where the result summarised a long stdout or stderr (see
// TestLongOutputIsSummarised), Stdout and Stderr are the whole output, read
// back with resources/read, so that a test checks all the program wrote.
func execute(t *testing.T, cs *mcp.ClientSession, args map[string]any) (*mcp.CallToolResult, execResult) {
	t.Helper()
	res := call(t, cs, "code_execute", args)
	if res.StructuredContent == nil {
		t.Fatalf("code_execute(%v): no structuredContent; isError=%v text=%q", abbrev(fmt.Sprint(args)), res.IsError, text(res))
	}
	out := decodeExec(t, res)
	out.Stdout = wholeOutput(t, cs, "stdout", out.Stdout, out.StdoutOmitted)
	out.Stderr = wholeOutput(t, cs, "stderr", out.Stderr, out.StderrOmitted)
	return res, out
}

// wholeOutput is the whole of a stream that a result showed as shown: shown
// itself, or, when om says the result left some of it out, what
// resources/read serves at om.URI.
func wholeOutput(t *testing.T, cs *mcp.ClientSession, stream, shown string, om *outputOmission) string {
	t.Helper()
	if om == nil {
		return shown
	}
	if om.URI == "" {
		t.Fatalf("the result left %d bytes of %s out and kept no whole copy: %s", om.Bytes, stream, abbrev(shown))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: om.URI})
	if err != nil || len(rr.Contents) != 1 {
		t.Fatalf("resources/read %s (the whole %s): %v", om.URI, stream, err)
	}
	if c := rr.Contents[0]; c.Blob != nil {
		return string(c.Blob) // an output with NUL bytes is not text
	}
	return rr.Contents[0].Text
}

func decodeExec(t *testing.T, res *mcp.CallToolResult) execResult {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var out execResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return out
}

// text is the concatenated text content of a result.
func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// checkExample runs the documented example and checks its answer.
func checkExample(t *testing.T, cs *mcp.ClientSession, wantSandbox string) {
	t.Helper()
	res, out := execute(t, cs, map[string]any{"language": "python", "code": "print(2**64)"})
	if res.IsError || out.ExitCode != 0 || out.Stdout != "18446744073709551616\n" || out.Sandbox != wantSandbox {
		t.Fatalf("example: isError=%v exit=%d stdout=%q stderr=%q sandbox=%q, want isError=false exit=0 stdout=%q sandbox=%q",
			res.IsError, out.ExitCode, out.Stdout, out.Stderr, out.Sandbox, "18446744073709551616\n", wantSandbox)
	}
	if !strings.Contains(text(res), "18446744073709551616") {
		t.Fatalf("example: the text content does not show stdout: %q", text(res))
	}
}

func abbrev(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// marker is a unique sleep(1) argument that identifies one test's processes.
func marker() string { return sandboxtest.Marker() }

// alive reports whether a live (not zombie) process has marker in its
// command line.
func alive(marker string) bool { return sandboxtest.MarkedAlive(marker) }

// eventWait is how long a test waits for an event that must come (a
// process to start or to end, a log line, a state): it only bounds a hang,
// so it is generous, never a performance bound.
const eventWait = 2 * time.Minute

// waitFor polls cond until it holds and fails the test if it does not
// within d: the wait for a real event that gives no signal to wait on. The
// failure names what, and says what each of detail returns then.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("%s did not happen within %s", what, d)
			for _, f := range detail {
				msg += "; " + f()
			}
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAlive waits for a process with marker to appear.
func waitAlive(t *testing.T, marker string) {
	t.Helper()
	waitFor(t, eventWait, "a process with marker "+marker+" to appear", func() bool { return alive(marker) })
}

// waitGone waits for every process with marker to end.
func waitGone(t *testing.T, marker string) {
	t.Helper()
	waitFor(t, eventWait, "every process with marker "+marker+" to end after its run was stopped", func() bool { return !alive(marker) })
}

func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func itoa(n int) string { return strconv.Itoa(n) }

// execCommand is exec.Command (named for the tests that drive raw stdio).
func execCommand(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }

// os_PATH is the test's PATH, for the server.
func os_PATH() string { return os.Getenv("PATH") }

// globRunDirs lists what the server left in its work directory: the
// codeexec-* work root (removed at exit) may exist while it runs, but no
// run-* directory inside it once runs are over.
func globRunDirs(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "codeexec-*", "run-*"))
}
