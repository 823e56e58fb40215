package approvals

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// A person approving a request sees its files and what the run can see of
// the workspace, and the approval is bound to the files' contents too.
func TestTheApproverSeesFilesAndWorkspace(t *testing.T) {
	t.Parallel()
	fake := &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeDocker, Workspace: &sandbox.WorkspaceStatus{Path: "/workspace", HostDir: "/home/me/project", Enforced: true}},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			return &sandbox.Result{Sandbox: sandbox.ModeDocker}, nil
		},
	}
	g := NewGate(fake, GateConfig{Policy: PolicyAlways, Timeout: time.Minute, Logger: slog.New(slog.DiscardHandler), WaitInterval: 10 * time.Millisecond})
	t.Cleanup(func() { g.Close() })
	req := sandbox.Request{Language: "python", Code: "print(open('data.csv').read())",
		Files: []artifacts.Input{{Path: "data.csv", Data: []byte("a,b\n")}}}
	var shown Ask
	approve := approverFunc(func(ctx context.Context, a Ask) (Decision, error) {
		shown = a
		return Decision{Outcome: OutcomeApproved, By: "me", Via: ViaElicitation}, nil
	})
	if _, err := g.Run(WithCall(context.Background(), Call{Approver: approve}), req); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("a,b\n"))
	if len(shown.Files) != 1 || shown.Files[0] != (AskFile{Path: "data.csv", Size: 4, SHA256: hex.EncodeToString(sum[:]), Text: "a,b\n"}) {
		t.Errorf("files shown %+v", shown.Files)
	}
	if shown.Workspace != "the project folder /home/me/project, at /workspace (read-only)" {
		t.Errorf("workspace shown %q", shown.Workspace)
	}
	other := req
	other.Files = []artifacts.Input{{Path: "data.csv", Data: []byte("a,c\n")}}
	noFiles := req
	noFiles.Files = nil
	if HashRequest(req) == HashRequest(other) || HashRequest(req) == HashRequest(noFiles) {
		t.Error("the request hash does not cover the files")
	}
	if HashRequest(noFiles) != HashRequest(sandbox.Request{Language: "python", Code: req.Code}) {
		t.Error("the hash of a request without files changed")
	}
}

func TestDescribeWorkspace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		w    *sandbox.WorkspaceStatus
		want string
	}{
		{nil, ""},
		{&sandbox.WorkspaceStatus{Path: "/workspace", HostDir: "/p", Writable: true, Enforced: true}, "read-write: the code can change or delete its files"},
		{&sandbox.WorkspaceStatus{Path: "/p", HostDir: "/p"}, "meant read-only, but not enforced on this host"},
	} {
		if got := DescribeWorkspace(c.w); !strings.Contains(got, c.want) || (c.want == "") != (got == "") {
			t.Errorf("DescribeWorkspace(%+v) = %q, want it to say %q", c.w, got, c.want)
		}
	}
}

// An approval is bound to the files as they were shown: an answer that
// comes back with the state issued for a request is refused for the same
// code with other files.
func TestApprovalIsBoundToTheFiles(t *testing.T) {
	t.Parallel()
	f := newGate(t, GateConfig{Policy: PolicyAlways, Timeout: time.Minute})
	later := approverFunc(func(ctx context.Context, a Ask) (Decision, error) { return Decision{}, ErrInputRequired })
	req := sandbox.Request{Language: "bash", Code: "bash run.sh", Files: []artifacts.Input{{Path: "run.sh", Data: []byte("echo shown\n")}}}
	_, err := f.gate.Run(WithCall(context.Background(), Call{Approver: later}), req)
	var ir *InputRequiredError
	if !errors.As(err, &ir) || ir.Ask.Files[0].Text != "echo shown\n" {
		t.Fatalf("Run = %v, want an input request that shows the file", err)
	}
	other := req
	other.Files = []artifacts.Input{{Path: "run.sh", Data: []byte("echo other\n")}}
	_, err = f.gate.Run(WithCall(context.Background(), Call{Answer: &Answer{State: ir.State, Decision: Decision{Outcome: OutcomeApproved, Via: ViaElicitation}}}), other)
	var de *DeniedError
	if !errors.As(err, &de) || de.Decision.Outcome != OutcomeForged || f.runs.Load() != 0 {
		t.Fatalf("an approval of other files: %v (runs %d), want it refused as forged", err, f.runs.Load())
	}
}
