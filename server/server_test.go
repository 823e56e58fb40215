package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// testClient is the tests' HTTP client: its timeout only bounds a hang
// (a server that never answers fails the test, with its name, instead of
// stopping the package at go test's timeout).
var testClient = &http.Client{Timeout: 2 * time.Minute}

// testOptions are the server's defaults with 1k of code and 2k of stdin.
func testOptions() Options {
	return Options{
		Version:   "test",
		Logger:    slog.New(slog.DiscardHandler),
		Languages: []string{"python", "javascript", "bash"},
		Limits: sandbox.Limits{Timeout: 10 * time.Second, MemoryBytes: 256 << 20, CPUs: 1, Processes: 64, OpenFiles: 256,
			FileSizeBytes: 64 << 20, OutputBytes: 1 << 20},
		MaxTimeout:     60 * time.Second,
		MaxCode:        1 << 10,
		MaxStdin:       2 << 10,
		MaxConcurrency: 4,
		Files:          artifacts.InputLimits{MaxFiles: 5, MaxTotalBytes: 1 << 10},
		Artifacts:      artifacts.Options{MaxArtifacts: 5, MaxBytes: 1 << 20},
		Store:          artifacts.NewStore(time.Minute, 4<<20),
	}
}

func newTestServer(t *testing.T, run func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error)) *Server {
	t.Helper()
	fake := &sandboxtest.Fake{RunFunc: run, Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Isolation: sandbox.Isolation{Environment: true},
		Languages: []sandbox.LanguageStatus{{Name: "python", Available: true}}}}
	return New(fake, testOptions())
}

func call(args any) mcp.CallToolRequest {
	var r mcp.CallToolRequest
	r.Params.Name = ToolExecute
	r.Params.Arguments = args
	return r
}

func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestDecodeExecuteArgs(t *testing.T) {
	opts := testOptions()
	cases := []struct {
		name string
		args any
		want string // substring of the error; "" means valid
	}{
		{"valid", map[string]any{"language": "python", "code": "print(1)"}, ""},
		{"alias", map[string]any{"language": "Py", "code": "print(1)"}, ""},
		{"raw json", json.RawMessage(`{"language":"bash","code":"echo hi","timeout_seconds":2.5}`), ""},
		{"nil", nil, "needs arguments"},
		{"array", []any{"python"}, "must be a JSON object"},
		{"invalid json", json.RawMessage(`{"language":`), "not valid JSON"},
		{"missing code", map[string]any{"language": "python"}, `missing required argument "code"`},
		{"missing language", map[string]any{"code": "x"}, `missing required argument "language"`},
		{"language number", map[string]any{"language": 3, "code": "x"}, "language must be a string, not a number"},
		{"code object", map[string]any{"language": "python", "code": map[string]any{}}, "code must be a string, not an object"},
		{"unknown language", map[string]any{"language": "cobol", "code": "x"}, `"cobol" is not supported here: use one of python, javascript, bash`},
		{"empty code", map[string]any{"language": "python", "code": "  \n\t"}, "code is empty"},
		{"code too large", map[string]any{"language": "python", "code": strings.Repeat("#", 1025)}, "over this server's limit of 1024 bytes (CODE_EXEC_MAX_CODE)"},
		{"nul byte", map[string]any{"language": "python", "code": "print(1)\x00"}, "NUL byte"},
		{"invalid utf-8", map[string]any{"language": "python", "code": "print('\xff')"}, "not valid UTF-8"},
		{"stdin number", map[string]any{"language": "python", "code": "x", "stdin": 5}, "stdin must be a string"},
		{"stdin too large", map[string]any{"language": "python", "code": "x", "stdin": strings.Repeat("a", 2049)}, "CODE_EXEC_MAX_STDIN"},
		{"extra argument", map[string]any{"language": "python", "code": "x", "sudo": true}, `unknown argument "sudo"`},
		{"timeout string", map[string]any{"language": "python", "code": "x", "timeout_seconds": "10"}, "timeout_seconds must be a number of seconds, not a string"},
		{"timeout zero", map[string]any{"language": "python", "code": "x", "timeout_seconds": 0}, "must be above 0"},
		{"timeout negative", map[string]any{"language": "python", "code": "x", "timeout_seconds": -5}, "must be above 0"},
		{"timeout over cap", map[string]any{"language": "python", "code": "x", "timeout_seconds": 61}, "above this server's cap of 60 seconds (CODE_EXEC_MAX_TIMEOUT)"},
		{"timeout absurd", map[string]any{"language": "python", "code": "x", "timeout_seconds": 1e308}, "CODE_EXEC_MAX_TIMEOUT"},
		{"timeout tiny", map[string]any{"language": "python", "code": "x", "timeout_seconds": 1e-9}, "too short"},
		{"timeout null is default", map[string]any{"language": "python", "code": "x", "timeout_seconds": nil}, ""},
		{"files", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "a.csv", "content": "1"}, map[string]any{"path": "b.bin", "content": "AAE=", "encoding": "base64"}}}, ""},
		{"files empty", map[string]any{"language": "python", "code": "x", "files": []any{}}, ""},
		{"files not an array", map[string]any{"language": "python", "code": "x", "files": "a.csv"}, "files must be an array of files"},
		{"file not an object", map[string]any{"language": "python", "code": "x", "files": []any{"a.csv"}}, "files[0] must be an object with path and content, not a string"},
		{"file without path", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"content": "1"}}}, "files[0] has no path"},
		{"file without content", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "a"}}}, `files[0] "a" has no content`},
		{"file content number", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "a", "content": 1}}}, "files[0].content must be a string, not a number"},
		{"file unknown field", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "a", "content": "1", "mode": "0755"}}}, `files[0] has the unknown field "mode"`},
		{"file escapes", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "../etc/passwd", "content": "1"}}}, `files[0] "../etc/passwd": contains ".."`},
		{"file absolute", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "/etc/passwd", "content": "1"}}}, "is an absolute path"},
		{"file bad base64", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "a", "content": "%%%", "encoding": "base64"}}}, "not valid base64"},
		{"file unknown encoding", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "a", "content": "1", "encoding": "gzip"}}}, `unknown encoding "gzip"`},
		{"too many files", map[string]any{"language": "python", "code": "x", "files": []any{
			map[string]any{"path": "1", "content": ""}, map[string]any{"path": "2", "content": ""}, map[string]any{"path": "3", "content": ""},
			map[string]any{"path": "4", "content": ""}, map[string]any{"path": "5", "content": ""}, map[string]any{"path": "6", "content": ""}}}, "over the limit of 5; send fewer files (CODE_EXEC_MAX_FILES)"},
		{"files too large", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "a", "content": strings.Repeat("x", 1025)}}}, "over the limit of 1.0 KiB; send fewer or smaller files (CODE_EXEC_MAX_FILES_BYTES)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := DecodeExecuteArgs(c.args, opts)
			if c.want == "" {
				if err != nil {
					t.Fatalf("rejected valid arguments: %v", err)
				}
				if a.Timeout <= 0 || a.Language == "" {
					t.Fatalf("decoded %+v", a)
				}
				return
			}
			var ae *ArgError
			if !errors.As(err, &ae) {
				t.Fatalf("error = %v, want an *ArgError", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestDecodeTimeout(t *testing.T) {
	a, err := DecodeExecuteArgs(map[string]any{"language": "js", "code": "1", "timeout_seconds": 2.5}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if a.Timeout != 2500*time.Millisecond || a.Language != "javascript" {
		t.Fatalf("decoded %+v", a)
	}
	a, _ = DecodeExecuteArgs(map[string]any{"language": "sh", "code": "1"}, testOptions())
	if a.Timeout != 10*time.Second || a.Language != "bash" {
		t.Fatalf("default timeout not applied: %+v", a)
	}
}

func TestExecuteResult(t *testing.T) {
	var got sandbox.Request
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		got = req
		return &sandbox.Result{ExitCode: 3, Stdout: "out\n", Stderr: "err\n", Duration: 12 * time.Millisecond, Sandbox: sandbox.ModeProcess}, nil
	})
	res, err := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x", "stdin": "in", "timeout_seconds": 5}))
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("a non-zero exit is not an error: %s", resultText(res))
	}
	out, ok := res.StructuredContent.(ExecuteOutput)
	if !ok || out.ExitCode != 3 || out.Stdout != "out\n" || out.Stderr != "err\n" || out.DurationMS != 12 || out.Sandbox != "process" {
		t.Fatalf("structured content = %+v", res.StructuredContent)
	}
	if got.Stdin != "in" || got.Limits.Timeout != 5*time.Second || got.Limits.MemoryBytes != 256<<20 || got.Limits.OutputBytes != 1<<20 {
		t.Fatalf("runner got %+v", got)
	}
	text := resultText(res)
	if !strings.HasPrefix(text, "stdout:\nout\n\nstderr:\nerr\n\n") || !strings.Contains(text, "Exit code 3") {
		t.Fatalf("text = %q", text)
	}
}

func TestLimitHitsAreErrors(t *testing.T) {
	cases := []struct {
		res  sandbox.Result
		want string
	}{
		{sandbox.Result{ExitCode: 137, TimedOut: true}, "Timed out"},
		{sandbox.Result{ExitCode: 137, OOMKilled: true}, "Out of memory"},
		{sandbox.Result{ExitCode: 137, Truncated: true}, "Output limit reached"},
	}
	for _, c := range cases {
		s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			r := c.res
			r.Sandbox = sandbox.ModeProcess
			return &r, nil
		})
		res, _ := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x"}))
		if !res.IsError || !strings.Contains(resultText(res), c.want) || res.StructuredContent == nil {
			t.Errorf("%s: isError=%v text=%q", c.want, res.IsError, resultText(res))
		}
	}
}

func TestRunnerErrorsAreOneSentence(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{context.Canceled, "cancelled"},
		{sandbox.ErrClosed, "shutting down"},
		{fmt.Errorf("%w: engine unreachable", sandbox.ErrSandboxUnavailable), "did not complete (engine unreachable); this is a server-side problem"},
		{fmt.Errorf("docker: %w: the container abc was stopped from outside.", sandbox.ErrSandboxUnavailable), "code did not complete (the container abc was stopped from outside); this"},
		{errors.New("lang: " + sandbox.ErrLanguageUnavailable.Error()), "could not be run"},
	}
	for _, c := range cases {
		s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) { return nil, c.err })
		res, err := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x"}))
		if err != nil || !res.IsError || !strings.Contains(resultText(res), c.want) {
			t.Errorf("%v: err=%v isError=%v text=%q", c.err, err, res.IsError, resultText(res))
		}
	}
}

func TestRejectionDoesNotRun(t *testing.T) {
	var runs atomic.Int32
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		runs.Add(1)
		return &sandbox.Result{}, nil
	})
	res, _ := s.handleExecute(context.Background(), call(map[string]any{"language": "cobol", "code": "x"}))
	if !res.IsError || runs.Load() != 0 {
		t.Fatalf("isError=%v runs=%d", res.IsError, runs.Load())
	}
}

func TestSessionEndCancelsItsRuns(t *testing.T) {
	s := newTestServer(t, nil)
	ctx := s.mcp.WithContext(context.Background(), fakeSession{id: "s1"})
	runCtx, done := s.trackRun(ctx)
	defer done()
	other, doneOther := s.trackRun(s.mcp.WithContext(context.Background(), fakeSession{id: "s2"}))
	defer doneOther()
	s.cancelSession("s1")
	if runCtx.Err() == nil {
		t.Fatal("the run of the ended session was not cancelled")
	}
	if other.Err() != nil {
		t.Fatal("a run of another session was cancelled")
	}
}

type fakeSession struct{ id string }

func (f fakeSession) Initialize()                                         {}
func (f fakeSession) Initialized() bool                                   { return true }
func (f fakeSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return nil }
func (f fakeSession) SessionID() string                                   { return f.id }

func TestInfo(t *testing.T) {
	s := newTestServer(t, nil)
	res, err := s.handleInfo(context.Background(), mcp.CallToolRequest{})
	if err != nil || res.IsError {
		t.Fatalf("sandbox_info failed: %v %s", err, resultText(res))
	}
	info := res.StructuredContent.(InfoOutput)
	if info.Mode != sandbox.ModeProcess || !info.Sandboxed || info.Limits.MaxTimeoutSeconds != 60 || info.Limits.MaxCodeBytes != 1024 || !strings.HasPrefix(info.Approval, "never") {
		t.Fatalf("info = %+v", info)
	}
	var req mcp.CallToolRequest
	req.Params.Arguments = map[string]any{"verbose": true}
	res, _ = s.handleInfo(context.Background(), req)
	if !res.IsError {
		t.Fatal("sandbox_info accepted arguments")
	}
}

func TestToolsDeclareAnnotationsAndSchemas(t *testing.T) {
	for _, mode := range sandbox.Modes {
		s := New(&sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: mode}}, testOptions())
		for _, st := range s.tools() {
			tool := st.Tool
			a := tool.Annotations
			if a.Title == "" || a.ReadOnlyHint == nil || a.DestructiveHint == nil || a.OpenWorldHint == nil || a.IdempotentHint == nil {
				t.Errorf("%s (%s): annotations not all set: %+v", tool.Name, mode, a)
			}
			for _, raw := range []json.RawMessage{tool.RawInputSchema, tool.RawOutputSchema} {
				var v map[string]any
				if err := json.Unmarshal(raw, &v); err != nil || v["type"] != "object" {
					t.Errorf("%s: schema is not an object schema: %v", tool.Name, err)
				}
			}
			if _, err := json.Marshal(tool); err != nil {
				t.Errorf("%s: %v", tool.Name, err)
			}
		}
	}
	all := sandbox.Isolation{Network: true, Filesystem: true, Identity: true, Environment: true, Processes: true}
	contained := executeTool(sandbox.Capabilities{Mode: sandbox.ModeDocker, Isolation: all}, &Options{}).Annotations
	if *contained.OpenWorldHint || *contained.DestructiveHint {
		t.Error("code_execute claims open-world or destructive with every boundary held")
	}
	open := executeTool(sandbox.Capabilities{Mode: sandbox.ModeNone}, &Options{}).Annotations
	if !*open.OpenWorldHint || !*open.DestructiveHint {
		t.Error("mode none's code_execute does not warn that code reaches the host")
	}
	// The hints follow the declared isolation, never the mode or the
	// names of the protections.
	isolated := executeTool(sandbox.Capabilities{Mode: sandbox.ModeProcess, Isolation: sandbox.Isolation{Network: true}, Protections: []sandbox.Protection{
		{Name: "filesystem isolation", Active: true},
	}}, &Options{}).Annotations
	if *isolated.OpenWorldHint || !*isolated.DestructiveHint {
		t.Error("process mode's hints do not follow its declared isolation")
	}
}

// TestToolTextNamesEnabledLanguages: code_execute's description lists the
// languages that can run, and only those.
func TestToolTextNamesEnabledLanguages(t *testing.T) {
	cases := []struct {
		name  string
		langs []sandbox.LanguageStatus
		want  string
	}{
		{"all", []sandbox.LanguageStatus{{Name: "bash", Available: true}, {Name: "javascript", Available: true}, {Name: "python", Available: true}}, "Languages: python, javascript (Node.js), bash."},
		{"python only", []sandbox.LanguageStatus{{Name: "bash", Reason: "disabled by CODE_EXEC_LANGUAGES"}, {Name: "javascript", Reason: "interpreter not found"}, {Name: "python", Available: true}}, "Languages: python."},
		{"none", []sandbox.LanguageStatus{{Name: "python", Reason: "interpreter not found"}}, "Languages: none can run on this server now (sandbox_info says why)."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			desc := executeTool(sandbox.Capabilities{Mode: sandbox.ModeProcess, Languages: c.langs}, &Options{}).Description
			if !strings.Contains(desc, c.want) {
				t.Errorf("description %q does not contain %q", desc, c.want)
			}
		})
	}
}

func TestRequireToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	withToken := testOptions()
	withToken.AuthToken = "0123456789abcdef-token"
	fake := &sandboxtest.Fake{}
	h := New(fake, withToken).authenticate(ok)
	cases := map[string]int{
		"":                              http.StatusUnauthorized,
		"Bearer wrong":                  http.StatusUnauthorized,
		"Bearer 0123456789abcdef-toke":  http.StatusUnauthorized,
		"Basic 0123456789abcdef-token":  http.StatusUnauthorized,
		"0123456789abcdef-token":        http.StatusUnauthorized,
		"Bearer 0123456789abcdef-token": http.StatusTeapot,
	}
	for header, want := range cases {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Authorization %q: status %d, want %d", header, rec.Code, want)
		}
		if want == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("401 without WWW-Authenticate")
		}
	}
	rec := httptest.NewRecorder()
	New(fake, testOptions()).authenticate(ok).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mcp", nil))
	if rec.Code != http.StatusTeapot {
		t.Errorf("without a configured token: status %d, want the handler's", rec.Code)
	}
}

func TestLimitBody(t *testing.T) {
	h := limitBody(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64)
		n := 0
		for {
			m, err := r.Body.Read(buf)
			n += m
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					w.WriteHeader(http.StatusRequestEntityTooLarge)
					return
				}
				break
			}
		}
		w.WriteHeader(http.StatusOK)
	}), 16)
	for body, want := range map[string]int{"small": 200, strings.Repeat("x", 17): 413} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body)))
		if rec.Code != want {
			t.Errorf("body of %d bytes: status %d, want %d", len(body), rec.Code, want)
		}
	}
}

func TestRenderText(t *testing.T) {
	got := RenderText(ExecuteOutput{Stdout: "18446744073709551616\n", Sandbox: "process", DurationMS: 15}, 10*time.Second, "1m")
	want := "stdout:\n18446744073709551616\n\nExit code 0 (after 15 ms in the process sandbox)."
	if got != want {
		t.Fatalf("RenderText = %q, want %q", got, want)
	}
	if got := RenderText(ExecuteOutput{Sandbox: "docker"}, time.Second, "1m"); !strings.HasPrefix(got, "(no output)") {
		t.Fatalf("no output: %q", got)
	}
	if got := RenderText(ExecuteOutput{TimedOut: true, Stdout: "partial", Sandbox: "docker"}, 2*time.Second, "1m"); !strings.Contains(got, "stdout:\npartial\n") || !strings.Contains(got, "2s limit") {
		t.Fatalf("timeout: %q", got)
	}
}

// TestSchemaAndDecoderAgree: the inputSchema that tools/list shows and the
// decoder come from one declaration: every property is accepted, every
// required one is required, every type is enforced, nothing else passes.
func TestSchemaAndDecoderAgree(t *testing.T) {
	var schema struct {
		Type                 string                     `json:"type"`
		Properties           map[string]json.RawMessage `json:"properties"`
		Required             []string                   `json:"required"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	if err := json.Unmarshal(executeTool(sandbox.Capabilities{}, &Options{}).RawInputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if schema.Type != "object" || schema.AdditionalProperties == nil || *schema.AdditionalProperties || len(schema.Properties) != 6 {
		t.Fatalf("schema = %+v", schema)
	}
	valid := map[string]any{"language": "python", "code": "print(1)", "stdin": "x", "timeout_seconds": 2,
		"files": []any{map[string]any{"path": "a.txt", "content": "x"}}, "packages": []any{}}
	wrong := map[string]any{"string": 7, "number": "7", "array": "x"}
	opts := testOptions()
	for name, raw := range schema.Properties {
		var prop struct {
			Type        string `json:"type"`
			Description string `json:"description"`
		}
		if err := json.Unmarshal(raw, &prop); err != nil || prop.Description == "" {
			t.Fatalf("%s: %s", name, raw)
		}
		if _, ok := valid[name]; !ok {
			t.Fatalf("the schema has %s, which this test does not know", name)
		}
		args := maps.Clone(valid)
		args[name] = wrong[prop.Type]
		if _, err := DecodeExecuteArgs(args, opts); err == nil || !strings.Contains(err.Error(), name+" must be") {
			t.Errorf("%s of the wrong type: %v", name, err)
		}
		delete(args, name)
		_, err := DecodeExecuteArgs(args, opts)
		if required := slices.Contains(schema.Required, name); required != (err != nil && strings.Contains(err.Error(), "missing required argument")) {
			t.Errorf("%s: required in the schema = %v, but without it the decoder says %v", name, required, err)
		}
	}
	if _, err := DecodeExecuteArgs(valid, opts); err != nil {
		t.Fatalf("every property at once: %v", err)
	}
	args := maps.Clone(valid)
	args["network"] = true
	if _, err := DecodeExecuteArgs(args, opts); err == nil || !strings.Contains(err.Error(), "takes language, code, stdin, timeout_seconds, files and packages") {
		t.Errorf("a property outside the schema: %v", err)
	}
}
