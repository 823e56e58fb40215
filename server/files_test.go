package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

func pngOf(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 3, 2))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func artifact(p string, data []byte, opts artifacts.Options) artifacts.Artifact {
	c, err := artifacts.Collect(fakeTree{p: data}, artifacts.Snapshot{}, opts)
	if err != nil || len(c.Artifacts) != 1 {
		panic("artifact: " + p)
	}
	return c.Artifacts[0]
}

// fakeTree is a Source of flat files.
type fakeTree map[string][]byte

func (f fakeTree) Walk(visit func(artifacts.Entry, artifacts.Opener) error) error {
	for p, data := range f {
		open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		if err := visit(artifacts.Entry{Path: p, Type: artifacts.TypeRegular, Size: int64(len(data))}, open); err != nil {
			return err
		}
	}
	return nil
}

func TestFilesReachTheRunner(t *testing.T) {
	var got sandbox.Request
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		got = req
		return &sandbox.Result{Sandbox: sandbox.ModeProcess}, nil
	})
	res, err := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x", "files": []any{
		map[string]any{"path": "./data//in.csv", "content": "a\n"},
		map[string]any{"path": "raw.bin", "content": "AAH/", "encoding": "base64"},
	}}))
	if err != nil || res.IsError {
		t.Fatalf("%v %s", err, resultText(res))
	}
	if len(got.Files) != 2 || got.Files[0].Path != "data/in.csv" || string(got.Files[0].Data) != "a\n" || !bytes.Equal(got.Files[1].Data, []byte{0, 1, 0xff}) {
		t.Errorf("runner got files %+v", got.Files)
	}
	if got.Artifacts == nil || got.Artifacts.MaxArtifacts != 5 || got.Artifacts.MaxBytes != 1<<20 {
		t.Errorf("runner got artifact options %+v", got.Artifacts)
	}
}

func TestAFileTheRunnerRefusesIsAnError(t *testing.T) {
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		return nil, sandbox.CheckFiles("python", req.Files)
	})
	res, _ := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x",
		"files": []any{map[string]any{"path": "main.py", "content": "1"}}}))
	if !res.IsError || resultText(res) != `files[0] "main.py": is the name of the python program file; give the file another name` {
		t.Errorf("result %v %q", res.IsError, resultText(res))
	}
}

func TestArtifactsComeBackAsContent(t *testing.T) {
	opts := artifacts.Options{InlineText: 100}
	img := pngOf(t)
	arts := []artifacts.Artifact{
		artifact("chart.png", img, opts),
		artifact("summary.csv", []byte("a,b\n1,2\n"), opts),
		artifact("big.csv", bytes.Repeat([]byte("a,b\n"), 100), opts),
	}
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		return &sandbox.Result{Sandbox: sandbox.ModeProcess, Artifacts: &artifacts.Collection{
			Artifacts: arts,
			Omitted:   []artifacts.Omission{{Path: "link", Reason: "a symbolic link, not followed"}},
		}}, nil
	})
	res, err := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x"}))
	if err != nil || res.IsError {
		t.Fatalf("%v %s", err, resultText(res))
	}
	if len(res.Content) != 4 {
		t.Fatalf("%d contents, want text, image, resource, resource_link: %+v", len(res.Content), res.Content)
	}
	im, ok := res.Content[1].(mcp.ImageContent)
	if data, _ := base64.StdEncoding.DecodeString(im.Data); !ok || im.MIMEType != "image/png" || !bytes.Equal(data, img) {
		t.Errorf("content 1: %+v", res.Content[1])
	}
	er, ok := res.Content[2].(mcp.EmbeddedResource)
	tr, _ := er.Resource.(mcp.TextResourceContents)
	if !ok || tr.Text != "a,b\n1,2\n" || tr.MIMEType != "text/csv" || !strings.HasPrefix(tr.URI, "codeexec://runs/") || !strings.HasSuffix(tr.URI, "/summary.csv") {
		t.Errorf("content 2: %+v", res.Content[2])
	}
	link, ok := res.Content[3].(mcp.ResourceLink)
	if !ok || link.Name != "big.csv" || link.MIMEType != "text/csv" || link.Size == nil || *link.Size != 400 || !strings.HasSuffix(link.URI, "/big.csv") {
		t.Errorf("content 3: %+v", res.Content[3])
	}
	out := res.StructuredContent.(ExecuteOutput)
	if len(out.Artifacts) != 3 || out.Artifacts[0].Path != "chart.png" || out.Artifacts[0].SHA256 == "" || out.Artifacts[2].URI != link.URI {
		t.Errorf("structured artifacts %+v", out.Artifacts)
	}
	if out.ArtifactsNote != "1 file was left out: link (a symbolic link, not followed)." || len(out.ArtifactsOmitted) != 1 {
		t.Errorf("note %q, omitted %+v", out.ArtifactsNote, out.ArtifactsOmitted)
	}
	text := resultText(res)
	if !strings.Contains(text, "Files the run made or changed:\n- chart.png (image/png,") || !strings.Contains(text, link.URI) || !strings.HasSuffix(text, "1 file was left out: link (a symbolic link, not followed).") {
		t.Errorf("text %q", text)
	}

	// resources/read, through the server's own routing of the template.
	msg := s.mcp.HandleMessage(context.Background(), json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"`+link.URI+`"}}`))
	b, _ := json.Marshal(msg)
	var rr struct {
		Result struct {
			Contents []struct{ URI, MimeType, Text string } `json:"contents"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &rr); err != nil || len(rr.Result.Contents) != 1 || rr.Result.Contents[0].Text != strings.Repeat("a,b\n", 100) || rr.Result.Contents[0].MimeType != "text/csv" {
		t.Errorf("resources/read: %s", b)
	}
	// A binary artifact is a blob.
	got, err := s.readArtifact(context.Background(), readReq(out.Artifacts[0].URI))
	blob, ok := got[0].(mcp.BlobResourceContents)
	if data, _ := base64.StdEncoding.DecodeString(blob.Blob); err != nil || !ok || !bytes.Equal(data, img) {
		t.Errorf("chart.png: %+v %v", got, err)
	}
	// Another session, or a made-up run, finds nothing.
	if _, err := s.readArtifact(context.Background(), readReq("codeexec://runs/0000/big.csv")); !errors.Is(err, artifacts.ErrNotFound) {
		t.Errorf("unknown run: %v", err)
	}
}

func TestOldClientsGetTextInsteadOfResourceLinks(t *testing.T) {
	big := artifact("big.bin", bytes.Repeat([]byte{0}, 10), artifacts.Options{})
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		return &sandbox.Result{Sandbox: sandbox.ModeProcess, Artifacts: &artifacts.Collection{Artifacts: []artifacts.Artifact{big}}}, nil
	})
	for _, v := range []string{"2024-11-05", "2025-03-26"} {
		ctx := contextWithProtocol(v)
		res, _ := s.handleExecute(ctx, call(map[string]any{"language": "python", "code": "x"}))
		if len(res.Content) != 2 {
			t.Fatalf("%s: %+v", v, res.Content)
		}
		tc, ok := res.Content[1].(mcp.TextContent)
		if !ok || !strings.Contains(tc.Text, "read it with resources/read at codeexec://runs/") {
			t.Errorf("%s: %+v", v, res.Content[1])
		}
	}
}

func TestArtifactStoreFullIsNoted(t *testing.T) {
	opts := testOptions()
	opts.Store = artifacts.NewStore(time.Minute, 5)
	big := artifact("big.bin", bytes.Repeat([]byte{0}, 10), artifacts.Options{})
	s := New(&sandboxtest.Fake{RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		return &sandbox.Result{Sandbox: sandbox.ModeProcess, Artifacts: &artifacts.Collection{Artifacts: []artifacts.Artifact{big}}}, nil
	}, Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}, opts)
	res, _ := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x"}))
	out := res.StructuredContent.(ExecuteOutput)
	if len(out.Artifacts) != 1 || out.Artifacts[0].URI != "" || !strings.Contains(out.ArtifactsNote, "could not be kept for resources/read (CODE_EXEC_ARTIFACT_STORE_BYTES is full)") || len(res.Content) != 1 {
		t.Errorf("artifacts %+v, note %q, %d contents", out.Artifacts, out.ArtifactsNote, len(res.Content))
	}
}

// contextWithProtocol is the context of a request in protocol version v.
func contextWithProtocol(v string) context.Context {
	return mcpserver.WithRequestProtocolInfo(context.Background(), &mcpserver.RequestProtocolInfo{ProtocolVersion: v})
}

func readReq(uri string) mcp.ReadResourceRequest {
	var r mcp.ReadResourceRequest
	r.Params.URI = uri
	return r
}

// The person asked to approve a run reads that it can see the workspace,
// and which files it brings.
func TestElicitationNamesFilesAndWorkspace(t *testing.T) {
	a := approvals.Ask{ID: "abc", Language: "python", Code: "print(1)", CodeSHA256: "00", Deadline: time.Now(),
		Files:     []approvals.AskFile{{Path: "data.csv", Size: 12, SHA256: strings.Repeat("ab", 32)}},
		Workspace: approvals.DescribeWorkspace(&sandbox.WorkspaceStatus{Path: "/workspace", HostDir: "/home/me/project", Writable: true, Enforced: true})}
	msg := elicitation(a).Message
	for _, want := range []string{", 1 file, request abc)", "The code can see the project folder /home/me/project, at /workspace (read-write: the code can change or delete its files).", "- data.csv (12 bytes, sha256 abababababababab)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the elicitation message lacks %q:\n%s", want, msg)
		}
	}
}

// In a session, files go into the session's directory before the call,
// and a call's artifacts are the files that call made or changed.
func TestFilesAndArtifactsInASession(t *testing.T) {
	r, err := host.New(context.Background(), host.Config{Languages: []string{"python"}, WorkRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	m := sessions.New(sessions.Config{Backend: r.Sessions(), MaxSessions: 1, IdleTimeout: time.Minute, MaxLifetime: time.Hour})
	t.Cleanup(func() { _ = m.Shutdown() })
	opts := testOptions()
	opts.Sessions, opts.SessionIdleTimeout = m, time.Minute
	opts.Artifacts = artifacts.Options{MaxArtifacts: 5}
	opts.Store = artifacts.NewStore(time.Minute, 1<<20)
	s := New(sessions.Route(m, r), opts)
	alice := s.mcp.WithContext(context.Background(), fakeSession{id: "alice"})
	res, _ := s.handleSessionCreate(alice, toolCall(ToolSessionCreate, map[string]any{}))
	if res.IsError {
		t.Fatalf("session_create: %s", resultText(res))
	}
	id := res.StructuredContent.(SessionOutput).SessionID
	exec := func(code string, files ...any) ExecuteOutput {
		t.Helper()
		args := map[string]any{"language": "python", "code": code, "session_id": id}
		if files != nil {
			args["files"] = files
		}
		res, _ := s.handleExecute(alice, call(args))
		if res.IsError {
			t.Fatalf("%q: %s", code, resultText(res))
		}
		return res.StructuredContent.(ExecuteOutput)
	}
	out := exec("print(open('data.csv').read().split()[1]); open('sum.txt', 'w').write('3')",
		map[string]any{"path": "data.csv", "content": "a,b\n1,2\n"})
	if out.Stdout != "1,2\n" || len(out.Artifacts) != 1 || out.Artifacts[0].Path != "sum.txt" || out.Artifacts[0].URI == "" {
		t.Fatalf("call with files: stdout %q artifacts %+v", out.Stdout, out.Artifacts)
	}
	if out := exec("print(open('sum.txt').read())"); out.Stdout != "3\n" || len(out.Artifacts) != 0 {
		t.Fatalf("a call that wrote nothing: stdout %q artifacts %+v", out.Stdout, out.Artifacts)
	}
	// A bad path is refused with the files' own sentence.
	res, _ = s.handleExecute(alice, call(map[string]any{"language": "python", "code": "1", "session_id": id,
		"files": []any{map[string]any{"path": "../x", "content": "1"}}}))
	if !res.IsError || !strings.Contains(resultText(res), "files[0]") {
		t.Errorf("a bad path in a session: %v %q", res.IsError, resultText(res))
	}
}
