package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"image"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// Files in and artifacts out, and the egress proxy, in sessions, in docker
// and process mode, through the go-sdk client (in kubernetes mode too, by
// TestKubernetesSessions).

// pngChartCode draws a 40x30 chart as a PNG with python's standard library
// only (the default image has no matplotlib), next to a CSV summary.
const pngChartCode = `import struct, zlib
rows = open("sales.csv").read().split()[1:]
w, h = 40, 30
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
pixels = b"".join(b"\x00" + bytes([255 if y > h - 2 * len(rows) else 0] * w) for y in range(h))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(pixels)) + chunk(b"IEND", b"")
open("chart.png", "wb").write(png)
open("summary.txt", "w").write("%d months\n" % len(rows))
open("raw.bin", "wb").write(bytes(range(256)) * 400)
print(rows[0])
`

// TestSessionFilesAndArtifacts: in a session, a file sent with files in one
// call is readable there and in later calls; a call's artifacts are the
// files that call made or changed (a chart as an image, a text embedded, a
// large file as a link that resources/read serves); a later call that
// writes nothing brings nothing back; a bad path is refused.
func TestSessionFilesAndArtifacts(t *testing.T) {
	t.Parallel()
	sessionModes(t, checkSessionFilesAndArtifacts)
}

// checkSessionFilesAndArtifacts is TestSessionFilesAndArtifacts in mode.
func checkSessionFilesAndArtifacts(t *testing.T, mode string) {
	env, _ := sessionEnv(t, mode, map[string]string{"CODE_EXEC_LANGUAGES": "python,bash"})
	cs, _ := connect(t, stdio, env, connectOpts{})
	py := createSession(t, cs, map[string]any{"language": "python"})

	res, out := inSession(t, cs, py, "python", "x = 41")
	wantStdout(t, res, out, "")
	if arts := artifactsOf(t, res); len(arts.Artifacts) != 0 {
		t.Fatalf("a call that wrote nothing: artifacts %+v", arts.Artifacts)
	}

	// Call 2: a CSV in; a chart, a summary and a large file out.
	res, out = inSession(t, cs, py, "python", pngChartCode, "files", []any{map[string]any{"path": "sales.csv", "content": readmeCSVExample(t).csv}})
	wantStdout(t, res, out, "Jan,120,80\n")
	byPath := map[string]artifactOut{}
	for _, a := range artifactsOf(t, res).Artifacts {
		byPath[a.Path] = a
	}
	if len(byPath) != 3 || byPath["chart.png"].MIMEType != "image/png" || byPath["summary.txt"].MIMEType != "text/plain" || byPath["raw.bin"].Size != 102400 {
		t.Fatalf("call 2's artifacts %+v, want chart.png, summary.txt and raw.bin (not sales.csv)", byPath)
	}
	var img *mcp.ImageContent
	var link *mcp.ResourceLink
	var summary string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.ImageContent:
			img = c
		case *mcp.ResourceLink:
			link = c
		case *mcp.EmbeddedResource:
			if c.Resource != nil {
				summary = c.Resource.Text
			}
		}
	}
	if img == nil || img.MIMEType != "image/png" {
		t.Fatalf("no image/png content: %+v", res.Content)
	}
	pic, format, err := image.Decode(bytes.NewReader(img.Data))
	if err != nil || format != "png" || pic.Bounds().Dx() != 40 || pic.Bounds().Dy() != 30 {
		t.Fatalf("the chart: %v, format %q; want a 40x30 PNG", err, format)
	}
	if sum := sha256.Sum256(img.Data); byPath["chart.png"].SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("chart.png's sha256 %s does not match the image", byPath["chart.png"].SHA256)
	}
	if summary != "6 months\n" {
		t.Errorf("summary.txt embedded as %q", summary)
	}
	if link == nil || link.URI != byPath["raw.bin"].URI {
		t.Fatalf("raw.bin is not a resource link: %+v", res.Content)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI}); err != nil || len(rr.Contents) != 1 || len(rr.Contents[0].Blob) != 102400 {
		t.Fatalf("resources/read %s: %v", link.URI, err)
	}

	// Call 3 reads what call 2 brought and made, and writes nothing:
	// nothing comes back.
	res, out = inSession(t, cs, py, "python", "print(open('sales.csv').read().split()[-1], open('summary.txt').read().strip(), x + 1)")
	wantStdout(t, res, out, "Jun,210,104 6 months 42\n")
	if arts := artifactsOf(t, res); len(arts.Artifacts) != 0 || arts.Note != "" {
		t.Fatalf("a call that wrote nothing: artifacts %+v, note %q", arts.Artifacts, arts.Note)
	}
	if strings.Contains(text(res), "Files the run made") {
		t.Errorf("the text of a call that wrote nothing lists files: %q", text(res))
	}

	// Call 4 changes one file: only that one comes back.
	res, out = inSession(t, cs, py, "python", "open('summary.txt', 'a').write('and more\\n')")
	wantStdout(t, res, out, "")
	if arts := artifactsOf(t, res); len(arts.Artifacts) != 1 || arts.Artifacts[0].Path != "summary.txt" {
		t.Fatalf("call 4's artifacts %+v, want summary.txt alone", arts.Artifacts)
	}

	// A bad path is refused, in a sentence that names it, and the code
	// does not run; so is a folder that the session made a link.
	res, _ = inSession(t, cs, py, "python", "print('ran')", "files", []any{map[string]any{"path": "../escape.txt", "content": "x"}})
	wantToolError(t, res, "files[0]")
	res, out = inSession(t, cs, py, "python", "import os; os.symlink('/etc', 'etc')")
	wantStdout(t, res, out, "")
	res, _ = inSession(t, cs, py, "python", "print('ran')", "files", []any{map[string]any{"path": "etc/planted", "content": "x"}})
	wantToolError(t, res, "files[0]", "symbolic link")

	// bash sessions too.
	sh := createSession(t, cs, map[string]any{"language": "bash"})
	res, out = inSession(t, cs, sh, "bash", "wc -l < in.txt; echo done > out.txt", "files", []any{map[string]any{"path": "in.txt", "content": "a\nb\n"}})
	wantStdout(t, res, out, "2\n")
	if arts := artifactsOf(t, res); len(arts.Artifacts) != 1 || arts.Artifacts[0].Path != "out.txt" {
		t.Fatalf("bash call's artifacts %+v, want out.txt", arts.Artifacts)
	}
	res, out = inSession(t, cs, sh, "bash", "cat out.txt")
	wantStdout(t, res, out, "done\n")
	if arts := artifactsOf(t, res); len(arts.Artifacts) != 0 {
		t.Fatalf("a bash call that wrote nothing: artifacts %+v", arts.Artifacts)
	}
}

// TestSessionNetworkAllowlist: under CODE_EXEC_NETWORK=allowlist a
// session's calls reach what runs reach, through the same proxy, and each
// call's result reports what that call reached. The destinations are
// listeners this test starts on this machine, every name pinned.
func TestSessionNetworkAllowlist(t *testing.T) {
	t.Parallel()
	sessionModes(t, checkSessionNetworkAllowlist)
}

// checkSessionNetworkAllowlist is TestSessionNetworkAllowlist in mode.
func checkSessionNetworkAllowlist(t *testing.T, mode string) {
	if mode == "process" && os.Getenv("CODE_EXEC_TEST_NO_USERNS") == "1" && os.Geteuid() != 0 {
		t.Skip("without user namespaces an ordinary user's server refuses CODE_EXEC_NETWORK=allowlist (no network namespace to hold runs to it); TestNetworkAllowlist checks that refusal")
	}
	// The listeners' address, and those that the program's raw sockets
	// try and must not reach: loopback (the sandbox's own); in docker mode
	// the bridge's address; in kubernetes mode this host's (as
	// TestKubernetesNetworkAllowlist).
	ip, raws := "127.0.0.1", []string{"127.0.0.1"}
	switch mode {
	case "docker":
		dockerEngine(t)
		if b := bridgeAddr(); b != "" {
			ip, raws = b, append(raws, b)
		}
	case "kubernetes":
		ip = sandboxtest.HostListenerIP()
		raws = sandboxtest.RawTargets(ip)
	}
	e := sandboxtest.StartEgress(t, ip)
	env, _ := sessionEnv(t, mode, map[string]string{
		"CODE_EXEC_LANGUAGES":             "python",
		"CODE_EXEC_NETWORK":               "allowlist",
		"CODE_EXEC_NETWORK_ALLOW":         strings.Join(e.Allow(), ","),
		"CODE_EXEC_NETWORK_RESOLVE":       e.Resolve(),
		"CODE_EXEC_NETWORK_ALLOW_PRIVATE": "true",
		"CODE_EXEC_TIMEOUT":               "30s",
	})
	cs, _ := connect(t, stdio, env, connectOpts{})
	py := createSession(t, cs, map[string]any{"language": "python"})
	type netExec struct {
		ExitCode int            `json:"exit_code"`
		Stdout   string         `json:"stdout"`
		Stderr   string         `json:"stderr"`
		Network  *egress.Report `json:"network"`
	}
	run := func(code string) (*mcp.CallToolResult, netExec) {
		t.Helper()
		res := call(t, cs, "code_execute", map[string]any{"language": "python", "code": code, "session_id": py})
		var out netExec
		remarshal(t, res.StructuredContent, &out)
		if res.IsError || out.ExitCode != 0 {
			t.Fatalf("isError=%v exit=%d\nstdout:\n%s\nstderr:\n%s", res.IsError, out.ExitCode, out.Stdout, out.Stderr)
		}
		return res, out
	}
	for i := range 2 {
		res, out := run(e.Program(raws...))
		for name, want := range map[string]string{"http": "200 plain-ok", "connect": "200 tls-ok", "notlisted": "HTTP 403", "port": "refused"} {
			if got := sandboxtest.Line(out.Stdout, name); !strings.HasPrefix(got, want) {
				t.Errorf("call %d: %s: %q, want %q", i, name, got, want)
			}
		}
		for _, ip := range raws {
			if got := sandboxtest.Line(out.Stdout, "raw "+ip); !strings.HasPrefix(got, "refused") {
				t.Errorf("call %d: raw socket to %s: %q, want refused", i, ip, got)
			}
		}
		if out.Network == nil || len(out.Network.Reached) != 3 {
			t.Fatalf("call %d: network %+v, want allowed.test on both ports and private.test", i, out.Network)
		}
		for _, r := range out.Network.Reached {
			if r.Connections != 1 {
				t.Errorf("call %d: %d connections to %s:%d, want 1: each call reports its own", i, r.Connections, r.Host, r.Port)
			}
		}
		if !strings.Contains(text(res), "reached allowed.test:") {
			t.Errorf("call %d: the text does not list the network:\n%s", i, text(res))
		}
		if i == 0 {
			// A call in between that reaches nothing reports nothing.
			res, out := run("x = 1")
			if !out.Network.Empty() || strings.Contains(text(res), "reached ") {
				t.Errorf("a call that reached nothing: network %+v, text %q", out.Network, text(res))
			}
		}
	}
}
