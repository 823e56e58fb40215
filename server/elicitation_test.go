package server

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// newGatedServer is a Server whose Runner is an approvals.Gate (policy
// always, no console) over a fake that counts its runs.
func newGatedServer(t *testing.T, elicit bool) (*Server, *atomic.Int32) {
	t.Helper()
	runs := new(atomic.Int32)
	fake := &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			runs.Add(1)
			return &sandbox.Result{Stdout: "ran\n", Sandbox: sandbox.ModeProcess}, nil
		},
	}
	gate := approvals.NewGate(fake, approvals.GateConfig{Policy: approvals.PolicyAlways, Timeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { gate.Close() })
	opts := testOptions()
	opts.Elicit = elicit
	opts.Approvals = gate
	return New(gate, opts), runs
}

// modern is the context of a protocol 2026-07-28 request from a client
// that can elicit.
func modern() context.Context {
	return mcpserver.WithRequestProtocolInfo(context.Background(), &mcpserver.RequestProtocolInfo{
		Modern:             true,
		ProtocolVersion:    "2026-07-28",
		ClientInfo:         &mcp.Implementation{Name: "ide", Version: "2.0"},
		ClientCapabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{}},
	})
}

// TestExecuteAsksThroughInputRequests: on protocol 2026-07-28 the handler
// returns the Gate's input request, and the retry with the answer runs the
// code once.
func TestExecuteAsksThroughInputRequests(t *testing.T) {
	t.Parallel()
	s, runs := newGatedServer(t, true)
	args := map[string]any{"language": "python", "code": "print('x')"}
	res, err := s.handleExecute(modern(), call(args))
	if err != nil || res.ResultType != mcp.ResultTypeInputRequired || res.RequestState == "" || runs.Load() != 0 {
		t.Fatalf("first call: %v, result type %q, state %q, runs %d", err, res.ResultType, res.RequestState, runs.Load())
	}
	ask, ok := res.InputRequests[approvalInputID]
	if !ok || ask.Elicitation == nil || !strings.Contains(ask.Elicitation.Message, "print('x')") || !strings.Contains(ask.Elicitation.Message, "ide 2.0") {
		t.Fatalf("input request = %+v", res.InputRequests)
	}

	retry := call(args)
	retry.Params.MultiRoundTripParams = mcp.MultiRoundTripParams{
		RequestState: res.RequestState,
		InputResponses: mcp.InputResponses{approvalInputID: mcp.NewElicitationInputResponse(mcp.ElicitationResult{
			ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"approve": true}},
		})},
	}
	res, err = s.handleExecute(modern(), retry)
	if err != nil || res.IsError || runs.Load() != 1 || !strings.Contains(resultText(res), "ran") {
		t.Fatalf("approved retry: %v isError=%v runs=%d %q", err, res.IsError, runs.Load(), resultText(res))
	}
	res, _ = s.handleExecute(modern(), retry)
	if !res.IsError || !strings.Contains(resultText(res), "already used") || runs.Load() != 1 {
		t.Fatalf("replayed retry: isError=%v runs=%d %q", res.IsError, runs.Load(), resultText(res))
	}
}

// TestExecuteWithoutAWayToAsk: with elicitation off and no console, a run
// that needs approval is refused without running, and an answer the
// client makes up is refused as forged.
func TestExecuteWithoutAWayToAsk(t *testing.T) {
	t.Parallel()
	s, runs := newGatedServer(t, false)
	args := map[string]any{"language": "python", "code": "print('x')"}
	res, _ := s.handleExecute(modern(), call(args))
	if !res.IsError || !strings.Contains(resultText(res), "no approvals console") || runs.Load() != 0 {
		t.Fatalf("isError=%v runs=%d %q", res.IsError, runs.Load(), resultText(res))
	}
	forged := call(args)
	forged.Params.MultiRoundTripParams = mcp.MultiRoundTripParams{InputResponses: mcp.InputResponses{approvalInputID: mcp.NewElicitationInputResponse(mcp.ElicitationResult{
		ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"approve": true}},
	})}}
	res, _ = s.handleExecute(modern(), forged)
	if !res.IsError || !strings.Contains(resultText(res), "not issued by this server") || runs.Load() != 0 {
		t.Fatalf("made-up approval: isError=%v runs=%d %q", res.IsError, runs.Load(), resultText(res))
	}
}

// TestWhoCanApprove: sandbox_info says who can approve, and why the
// client's answers count or not.
func TestWhoCanApprove(t *testing.T) {
	t.Parallel()
	const console = "http://127.0.0.1:8081/"
	cases := []struct {
		name         string
		elicit       bool
		why          string
		console      string
		want, absent []string
	}{
		{"stdio", true, "over stdio", console, []string{"the person behind the MCP client", "operators on the approvals console at " + console, "elicitation answers count: over stdio"}, []string{"only", "do not count"}},
		{"behind a token", false, "a client that holds CODE_EXEC_AUTH_TOKEN", console, []string{"only operators on the approvals console", "do not count: a client that holds CODE_EXEC_AUTH_TOKEN"}, []string{"person behind"}},
		{"nobody", false, "CODE_EXEC_APPROVAL_ELICIT=false", "", []string{"nobody", "do not count"}, nil},
	}
	for _, c := range cases {
		s, _ := newGatedServer(t, c.elicit)
		s.opts.ElicitReason, s.opts.ConsoleURL = c.why, c.console
		info := s.Info()
		for _, w := range c.want {
			if !strings.Contains(info.Approval, w) {
				t.Errorf("%s: sandbox_info approval %q lacks %q", c.name, info.Approval, w)
			}
		}
		for _, w := range c.absent {
			if strings.Contains(info.Approval, w) {
				t.Errorf("%s: sandbox_info approval %q says %q", c.name, info.Approval, w)
			}
		}
	}
}
