package server

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// fakePackages is a packages layer as the server sees it.
type fakePackages struct{ info packages.Info }

func (f fakePackages) Info() *packages.Info { return &f.info }

func TestPackagesArgument(t *testing.T) {
	t.Parallel()
	on := testOptions()
	on.Packages = fakePackages{packages.Info{Enabled: true, PipIndexURL: "http://127.0.0.1:1/simple/", Detail: "on"}}
	cases := []struct {
		name string
		opts Options
		args map[string]any
		want string // substring of the error; "" means valid
	}{
		{"off", testOptions(), map[string]any{"language": "python", "code": "1", "packages": []any{"requests==2.31.0"}}, "turned off on this server (CODE_EXEC_PACKAGES=false)"},
		{"off, empty list", testOptions(), map[string]any{"language": "python", "code": "1", "packages": []any{}}, ""},
		{"on", on, map[string]any{"language": "python", "code": "1", "packages": []any{"Requests==2.31.0"}}, ""},
		{"an option", on, map[string]any{"language": "python", "code": "1", "packages": []any{"--index-url=http://evil/"}}, `packages[0] "--index-url=http://evil/" is refused: options are not accepted`},
		{"a URL", on, map[string]any{"language": "python", "code": "1", "packages": []any{"x", "pkg @ https://evil/pkg.whl"}}, `packages[1] "pkg @ https://evil/pkg.whl" is refused`},
		{"not a string", on, map[string]any{"language": "python", "code": "1", "packages": []any{7}}, "packages[0] must be a string"},
		{"no registry", on, map[string]any{"language": "javascript", "code": "1", "packages": []any{"lodash@4.17.21"}}, "CODE_EXEC_NPM_REGISTRY"},
		{"bash", on, map[string]any{"language": "bash", "code": "1", "packages": []any{"x"}}, "python and javascript"},
	}
	for _, c := range cases {
		a, err := DecodeExecuteArgs(c.args, c.opts)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		case c.name == "on" && !slices.Equal(a.Packages, []string{"requests==2.31.0"}):
			t.Errorf("normalized packages %q", a.Packages)
		}
	}
}

func TestPackagesReachTheRunnerAndSandboxInfo(t *testing.T) {
	t.Parallel()
	var got []string
	fake := &sandboxtest.Fake{RunFunc: func(_ context.Context, req sandbox.Request) (*sandbox.Result, error) {
		got = req.Packages
		if req.PackageDir != nil {
			t.Error("the server set PackageDir: only the packages layer may")
		}
		return &sandbox.Result{}, nil
	}, Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Languages: []sandbox.LanguageStatus{{Name: "python", Available: true}}}}
	opts := testOptions()
	opts.Packages = fakePackages{packages.Info{Enabled: true, PipIndexURL: "http://127.0.0.1:1/simple/", Detail: "on", Cache: &packages.CacheStats{Entries: 2, Bytes: 10, MaxBytes: 100}}}
	s := New(fake, opts)
	res := s.execute(context.Background(), call(map[string]any{"language": "python", "code": "1", "packages": []any{"b==1", "a==2"}}))
	if res.IsError || !slices.Equal(got, []string{"a==2", "b==1"}) {
		t.Fatalf("run: %s, packages %q", resultText(res), got)
	}
	if info := s.Info().Packages; !info.Enabled || info.Cache.Entries != 2 || info.Cache.MaxBytes != 100 {
		t.Errorf("sandbox_info packages %+v", info)
	}
	if info := New(fake, testOptions()).Info().Packages; info == nil || info.Enabled || !strings.Contains(info.Detail, "CODE_EXEC_PACKAGES=false") {
		t.Errorf("sandbox_info with packages off: %+v", info)
	}
}

func TestRenderTextNamesPackages(t *testing.T) {
	t.Parallel()
	got := RenderText(ExecuteOutput{Stdout: "42\n", Sandbox: "process", Packages: &sandbox.PackagesReport{List: []string{"a==1"}, InstallMS: 812}}, time.Second, "1m")
	if !strings.Contains(got, "Packages: a==1 (installed in 812 ms).") {
		t.Errorf("RenderText = %q", got)
	}
}

func TestInstallErrorsReadWell(t *testing.T) {
	t.Parallel()
	err := &packages.InstallError{Tool: "pip", Reason: "exited with code 1", Output: "ERROR: No matching distribution found for x==9"}
	msg := runErrorMessage(err, ExecuteArgs{Language: "python"})
	if !strings.Contains(msg, "could not be installed") || !strings.Contains(msg, "No matching distribution") {
		t.Errorf("message %q", msg)
	}
}

// The person asked to approve a run reads which packages it installs.
func TestElicitationNamesPackages(t *testing.T) {
	t.Parallel()
	a := approvals.Ask{ID: "abc", Language: "python", Code: "import requests", CodeSHA256: "00", Deadline: time.Now(), Packages: []string{"requests==2.31.0", "idna==3.6"}}
	msg := elicitation(a).Message
	for _, want := range []string{"Packages installed for it first", "- requests==2.31.0\n", "- idna==3.6\n"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the elicitation message lacks %q:\n%s", want, msg)
		}
	}
}

// countingBackend is fakeBackend that counts the sessions it started.
type countingBackend struct{ started *atomic.Int32 }

func (b countingBackend) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	b.started.Add(1)
	return fakeBackend{}.Start(ctx, spec)
}

// TestSessionCreateWithPackagesIsApproved: session_create with packages
// goes through the approvals gate like a run: on protocol 2026-07-28 the
// client is asked to let a session with those packages be created, nothing
// starts before the answer, and the retry with the approval creates it. A
// session without packages is not a request.
func TestSessionCreateWithPackagesIsApproved(t *testing.T) {
	t.Parallel()
	started := new(atomic.Int32)
	m := sessions.New(sessions.Config{Backend: countingBackend{started}, MaxSessions: 4, IdleTimeout: time.Minute, MaxLifetime: time.Hour})
	t.Cleanup(func() { _ = m.Shutdown() })
	fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}
	gate := approvals.NewGate(sessions.Route(m, fake), approvals.GateConfig{Policy: approvals.PolicyAlways, Timeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { gate.Close() })
	opts := testOptions()
	opts.Elicit = true
	opts.Approvals = gate
	opts.Sessions, opts.SessionIdleTimeout = m, time.Minute
	opts.Packages = fakePackages{packages.Info{Enabled: true, PipIndexURL: "http://127.0.0.1:1/simple/", Detail: "on"}}
	s := New(gate, opts)

	args := map[string]any{"language": "python", "packages": []any{"Requests==2.31.0"}}
	res, err := s.handleSessionCreate(modern(), toolCall(ToolSessionCreate, args))
	if err != nil || res.ResultType != mcp.ResultTypeInputRequired || started.Load() != 0 {
		t.Fatalf("first call: %v, result type %q, sessions started %d", err, res.ResultType, started.Load())
	}
	ask := res.InputRequests[approvalInputID].Elicitation
	if ask == nil || !strings.Contains(ask.Message, "asks to create a python session with packages") || !strings.Contains(ask.Message, "- requests==2.31.0\n") {
		t.Fatalf("the question: %+v", ask)
	}
	retry := toolCall(ToolSessionCreate, args)
	retry.Params.MultiRoundTripParams = mcp.MultiRoundTripParams{
		RequestState: res.RequestState,
		InputResponses: mcp.InputResponses{approvalInputID: mcp.NewElicitationInputResponse(mcp.ElicitationResult{
			ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"approve": true}},
		})},
	}
	res, err = s.handleSessionCreate(modern(), retry)
	if err != nil || res.IsError || started.Load() != 1 || !slices.Equal(res.StructuredContent.(SessionOutput).Packages, []string{"requests==2.31.0"}) {
		t.Fatalf("approved retry: %v isError=%v started=%d %q", err, res.IsError, started.Load(), resultText(res))
	}
	res, _ = s.handleSessionCreate(modern(), toolCall(ToolSessionCreate, map[string]any{"language": "python"}))
	if res.IsError || started.Load() != 2 {
		t.Fatalf("a session without packages: isError=%v started=%d %q", res.IsError, started.Load(), resultText(res))
	}
}
