package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"image"
	_ "image/png" // image.Decode reads PNG
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// dataScienceImage is what docker/build-sandbox-image.sh --profile
// datascience builds.
const dataScienceImage = "codeexec-sandbox:datascience"

// dataMode is a sandbox mode in which python can use pandas and matplotlib.
type dataMode struct {
	name string
	env  map[string]string
}

// dataModes are process mode (Debian's python3-pandas and -matplotlib on
// this host) and docker mode with the data-science image, each skipped when
// this host lacks it (and failing instead with CODE_EXEC_REQUIRE_DATASCIENCE=1
// or CODE_EXEC_REQUIRE_DOCKER=1).
func dataModes(t *testing.T) []dataMode {
	t.Helper()
	return []dataMode{
		{"process", map[string]string{"CODE_EXEC_SANDBOX": "process"}},
		{"docker", map[string]string{"CODE_EXEC_SANDBOX": "docker", "CODE_EXEC_DOCKER_IMAGE": dataScienceImage,
			"CODE_EXEC_DOCKER_POOL_SIZE": "1", "CODE_EXEC_LANGUAGES": "python,bash"}},
	}
}

// requireMode skips (or fails) when this host cannot run m with pandas.
func requireMode(t *testing.T, m dataMode) {
	t.Helper()
	switch m.name {
	case "process":
		if err := exec.Command("/usr/bin/python3", "-I", "-c", "import pandas, matplotlib").Run(); err != nil {
			if os.Getenv("CODE_EXEC_REQUIRE_DATASCIENCE") == "1" {
				t.Fatalf("/usr/bin/python3 cannot import pandas and matplotlib (CODE_EXEC_REQUIRE_DATASCIENCE=1; run .ci/ensure-datascience.sh): %v", err)
			}
			t.Skipf("/usr/bin/python3 cannot import pandas and matplotlib (run .ci/ensure-datascience.sh): %v", err)
		}
	case "docker":
		cli := dockerEngine(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.ImageInspect(ctx, dataScienceImage); err != nil {
			msg := "the data-science image " + dataScienceImage + " is missing (build it with docker/build-sandbox-image.sh --profile datascience): " + err.Error()
			if os.Getenv("CODE_EXEC_REQUIRE_DOCKER") == "1" {
				t.Fatalf("%s (CODE_EXEC_REQUIRE_DOCKER=1)", msg)
			}
			t.Skip(msg)
		}
	}
}

// artifactOut is one artifact of code_execute's structuredContent.
type artifactOut struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	MIMEType string `json:"mime_type"`
	SHA256   string `json:"sha256"`
	URI      string `json:"uri"`
}

type artifactsOut struct {
	Artifacts []artifactOut `json:"artifacts"`
	Omitted   []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"artifacts_omitted"`
	Note string `json:"artifacts_note"`
}

func artifactsOf(t *testing.T, res *mcp.CallToolResult) artifactsOut {
	t.Helper()
	var a artifactsOut
	remarshal(t, res.StructuredContent, &a)
	return a
}

// csvExample is the README's "Files in, charts out" example: a request
// (the CSV it brings as sales.csv, and the program, which prints a summary
// and shows a chart without saving it) and the summary the README shows.
type csvExample struct {
	csv, code, table string
}

// readmeCSVExample reads the example from README.md: the python block of
// the section, whose first comment lines are the call with the CSV's
// content as a JSON string, and the output block after it.
func readmeCSVExample(t *testing.T) csvExample {
	t.Helper()
	_, readme := moduleFile(t, "README.md")
	_, section, ok := strings.Cut(readme, "\n## Files in, charts out\n")
	if !ok {
		t.Fatal("README.md has no '## Files in, charts out' section")
	}
	m := regexp.MustCompile("(?s)```python\n(.*?)```\n\n```\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the section has no ```python block followed by an output block")
	}
	var call, code []string
	for _, line := range strings.SplitAfter(m[1], "\n") {
		if len(code) == 0 && strings.HasPrefix(line, "#") {
			call = append(call, line)
		} else {
			code = append(code, line)
		}
	}
	content := regexp.MustCompile(`"content": ("(?:[^"\\]|\\.)*")`).FindStringSubmatch(strings.Join(call, ""))
	if content == nil {
		t.Fatalf("the call %q brings no file content", call)
	}
	var csv string
	if err := json.Unmarshal([]byte(content[1]), &csv); err != nil {
		t.Fatalf("the file's content %s: %v", content[1], err)
	}
	return csvExample{csv: csv, code: strings.Join(code, ""), table: m[2]}
}

// TestFilesAndArtifacts is the data-science workflow of the README in
// process and docker modes, over the official SDK client: a CSV in, a
// pandas summary out, the chart back as a PNG image; a large file back as a
// resource_link that resources/read serves; every bad path rejected; a link
// to a host file not followed.
func TestFilesAndArtifacts(t *testing.T) {
	t.Parallel()
	for _, m := range dataModes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			requireMode(t, m)
			// pandas and matplotlib take seconds of CPU to load, many times
			// that on a busy machine: the chart's call may take up to three
			// minutes (a bound against a hang, not a performance target).
			env := serverEnv(t, m.env)
			env["CODE_EXEC_MAX_TIMEOUT"] = "180s"
			cs, _ := connect(t, stdio, env, connectOpts{})

			t.Run("sandbox_info lists python's packages", func(t *testing.T) {
				var got []string
				for _, l := range sandboxInfo(t, cs).Languages {
					for _, p := range l.Packages {
						if l.Name == "python" && p.Available && p.Version != "" {
							got = append(got, p.Name)
						}
					}
				}
				if strings.Join(got, " ") != "numpy pandas matplotlib scipy" {
					t.Errorf("python packages available: %v", got)
				}
			})

			t.Run("a CSV in, a summary and a chart out", func(t *testing.T) {
				ex := readmeCSVExample(t)
				res, out := execute(t, cs, map[string]any{"language": "python", "code": ex.code, "timeout_seconds": 180,
					"files": []any{map[string]any{"path": "sales.csv", "content": ex.csv}}})
				if res.IsError || out.ExitCode != 0 || out.Stdout != ex.table {
					t.Fatalf("isError=%v exit=%d stdout=%q stderr=%q; want the README's table %q", res.IsError, out.ExitCode, out.Stdout, out.Stderr, ex.table)
				}
				var images []*mcp.ImageContent
				for _, c := range res.Content {
					if im, ok := c.(*mcp.ImageContent); ok {
						images = append(images, im)
					}
				}
				if len(images) != 1 || images[0].MIMEType != "image/png" {
					t.Fatalf("want one image/png content, got %d: %+v", len(images), res.Content)
				}
				img, format, err := image.Decode(bytes.NewReader(images[0].Data))
				if err != nil || format != "png" || img.Bounds().Dx() != 640 || img.Bounds().Dy() != 480 {
					t.Fatalf("the image: %v, format %q, %v; want a 640x480 PNG", err, format, img.Bounds())
				}
				arts := artifactsOf(t, res)
				sum := sha256.Sum256(images[0].Data)
				if len(arts.Artifacts) != 1 {
					t.Fatalf("artifacts %+v", arts.Artifacts)
				}
				a := arts.Artifacts[0]
				if a.Path != "figure_1.png" || a.MIMEType != "image/png" || a.Size != int64(len(images[0].Data)) || a.SHA256 != hex.EncodeToString(sum[:]) || !strings.HasPrefix(a.URI, "codeexec://runs/") {
					t.Errorf("artifact %+v", a)
				}
				if !strings.Contains(text(res), "figure_1.png (image/png") {
					t.Errorf("the text does not mention the chart: %q", text(res))
				}
				if m.name == "process" && *update {
					// The picture in the README.
					if err := os.WriteFile(filepath.Join("..", "docs", "images", "csv-chart.png"), images[0].Data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			})

			t.Run("a large file comes back as a link that resources/read serves", func(t *testing.T) {
				res, out := execute(t, cs, map[string]any{"language": "python", "code": `
rows = ["id,value"] + [f"{i},{i * i}" for i in range(20000)]
open("squares.csv", "w").write("\n".join(rows) + "\n")
open("raw.bin", "wb").write(bytes(range(256)) * 1000)
`})
				if res.IsError || out.ExitCode != 0 {
					t.Fatalf("isError=%v exit=%d stderr=%q", res.IsError, out.ExitCode, out.Stderr)
				}
				links := map[string]*mcp.ResourceLink{}
				for _, c := range res.Content {
					if l, ok := c.(*mcp.ResourceLink); ok {
						links[l.Name] = l
					}
				}
				csv, raw := links["squares.csv"], links["raw.bin"]
				if csv == nil || raw == nil || csv.MIMEType != "text/csv" || raw.MIMEType != "application/octet-stream" || raw.Size == nil || *raw.Size != 256000 {
					t.Fatalf("resource links %+v", res.Content)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: csv.URI})
				if err != nil || len(rr.Contents) != 1 || !strings.HasPrefix(rr.Contents[0].Text, "id,value\n0,0\n1,1\n") || !strings.HasSuffix(rr.Contents[0].Text, "19999,399960001\n") {
					t.Fatalf("resources/read %s: %v %+v", csv.URI, err, rr)
				}
				rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: raw.URI})
				if err != nil || len(rr.Contents) != 1 || !bytes.Equal(rr.Contents[0].Blob, bytes.Repeat(func() []byte {
					b := make([]byte, 256)
					for i := range b {
						b[i] = byte(i)
					}
					return b
				}(), 1000)) {
					t.Fatalf("resources/read %s: %v", raw.URI, err)
				}
				// A URI of another run, or of a file the run did not make, is
				// not served.
				for _, uri := range []string{"codeexec://runs/00000000000000000000000000000000/squares.csv", strings.TrimSuffix(csv.URI, "squares.csv") + "nope.csv"} {
					if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
						t.Errorf("resources/read %s answered", uri)
					}
				}
			})

			t.Run("every bad path is rejected", func(t *testing.T) {
				for _, p := range []string{"", "/etc/passwd", "../escape.txt", "a/../../b", "a/..", "..", ".", "dir/", `a\b`, "a\x00b", "line\nbreak", "main.py"} {
					res := call(t, cs, "code_execute", map[string]any{"language": "python", "code": "print('ran')",
						"files": []any{map[string]any{"path": p, "content": "x"}}})
					if !res.IsError || !strings.Contains(text(res), "files[0]") || strings.Contains(text(res), "ran") {
						t.Errorf("path %q: isError=%v text=%q", p, res.IsError, text(res))
					}
				}
				for _, files := range [][]any{
					{map[string]any{"path": "a.txt", "content": "1"}, map[string]any{"path": "./a.txt", "content": "2"}},
					{map[string]any{"path": "a", "content": "1"}, map[string]any{"path": "a/b", "content": "2"}},
					{map[string]any{"path": "a.bin", "content": "@@@", "encoding": "base64"}},
					{map[string]any{"path": "a.txt", "content": "1", "encoding": "latin-1"}},
				} {
					res := call(t, cs, "code_execute", map[string]any{"language": "python", "code": "print('ran')", "files": files})
					if !res.IsError || !strings.Contains(text(res), "files[") {
						t.Errorf("files %v: isError=%v text=%q", files, res.IsError, text(res))
					}
				}
			})

			t.Run("a link to a host file is not followed", func(t *testing.T) {
				res, out := execute(t, cs, map[string]any{"language": "python", "code": `
import os
os.symlink("/etc/passwd", "passwd")
os.symlink("/etc", "etc")
print("linked")
`})
				if res.IsError || out.Stdout != "linked\n" {
					t.Fatalf("isError=%v stdout=%q stderr=%q", res.IsError, out.Stdout, out.Stderr)
				}
				arts := artifactsOf(t, res)
				if len(arts.Artifacts) != 0 || len(arts.Omitted) != 2 || !strings.Contains(arts.Note, "symbolic link, not followed") {
					t.Errorf("artifacts %+v omitted %+v note %q", arts.Artifacts, arts.Omitted, arts.Note)
				}
				for _, c := range res.Content {
					if tc, ok := c.(*mcp.TextContent); ok && strings.Contains(tc.Text, "root:") {
						t.Errorf("the host's /etc/passwd came back: %q", tc.Text)
					}
				}
			})
		})
	}
}

// TestWorkspace: the operator's project folder is readable at $WORKSPACE,
// and read-only really is read-only, in process and docker modes.
func TestWorkspace(t *testing.T) {
	t.Parallel()
	for _, m := range dataModes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			if m.name == "docker" {
				dockerEngine(t)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "notes.md"), []byte("# project notes\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{dir, filepath.Dir(dir)} {
				if err := os.Chmod(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			env := map[string]string{"CODE_EXEC_WORKSPACE": dir}
			for k, v := range m.env {
				env[k] = v
			}
			if m.name == "docker" {
				env["CODE_EXEC_DOCKER_IMAGE"] = "codeexec-sandbox:latest"
			}
			cs, _ := connect(t, stdio, serverEnv(t, env), connectOpts{})
			info := sandboxInfo(t, cs)
			if info.Workspace == nil || info.Workspace.HostDir != dir || info.Workspace.Writable || !info.Workspace.Enforced {
				t.Fatalf("sandbox_info workspace %+v", info.Workspace)
			}
			res, out := execute(t, cs, map[string]any{"language": "bash", "code": `echo "$WORKSPACE"; cat "$WORKSPACE/notes.md"; echo x > "$WORKSPACE/new.txt" && echo wrote; rm -f "$WORKSPACE/notes.md" && echo removed; true`})
			if res.IsError || !strings.HasPrefix(out.Stdout, info.Workspace.Path+"\n# project notes\n") || strings.Contains(out.Stdout, "wrote") || strings.Contains(out.Stdout, "removed") {
				t.Fatalf("isError=%v stdout=%q stderr=%q", res.IsError, out.Stdout, out.Stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, "new.txt")); err == nil {
				t.Error("a read-only workspace was written")
			}
			if _, err := os.Stat(filepath.Join(dir, "notes.md")); err != nil {
				t.Errorf("a read-only workspace lost a file: %v", err)
			}
		})
	}
}

// TestWorkspaceRunsCannotUse: in process mode, a workspace that the runs'
// user cannot use as configured stops the server at start, with a message
// that names the folder and the exact fix, instead of a PermissionError in
// every program that reads it; files below it that runs cannot read are
// named in a warning at start and in sandbox_info. As root each run is a
// host user of its own, for whom the folder's permissions for others apply;
// as another user, runs are that user.
func TestWorkspaceRunsCannotUse(t *testing.T) {
	t.Parallel()
	root := os.Geteuid() == 0
	// What the runs' user lacks in each case, and the fix the server gives.
	private, fix, fileMode, fileFix := os.FileMode(0o700), "chmod o+rx ", os.FileMode(0o600), "chmod -R o+rX "
	if !root {
		private, fix, fileMode, fileFix = 0o300, "chmod u+rx ", 0o200, "chmod -R u+rX "
	}
	workspace := func(t *testing.T, mode os.FileMode) string {
		t.Helper()
		parent := t.TempDir()
		ws := filepath.Join(parent, "project")
		if err := os.Mkdir(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "notes.md"), []byte("# notes\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for p, m := range map[string]os.FileMode{parent: 0o755, ws: mode} {
			if err := os.Chmod(p, m); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _ = os.Chmod(ws, 0o755) }) // so that the test can remove it
		return ws
	}
	cases := []struct {
		name, mode string
		perm       os.FileMode
		fix        string
	}{{"private folder", "ro", private, fix}}
	if root {
		cases = append(cases, struct {
			name, mode string
			perm       os.FileMode
			fix        string
		}{"read-write without write permission", "rw", 0o755, "chmod o+rwx "})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ws := workspace(t, c.perm)
			code, stdout, stderr := runBinary(t, serverEnv(t, map[string]string{"CODE_EXEC_WORKSPACE": ws, "CODE_EXEC_WORKSPACE_MODE": c.mode, "CODE_EXEC_LANGUAGES": "python"}))
			if code != 1 || stdout != "" {
				t.Errorf("exit code %d, stdout %q; want 1 and nothing", code, stdout)
			}
			last := stderr[strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n")+1:]
			for _, w := range []string{"codeexec: ", "CODE_EXEC_WORKSPACE", c.fix + ws} {
				if !strings.Contains(last, w) {
					t.Errorf("the last line of stderr does not say %q: %s", w, last)
				}
			}
		})
	}
	t.Run("a file runs cannot read", func(t *testing.T) {
		t.Parallel()
		ws := workspace(t, 0o755)
		secret := filepath.Join(ws, "private.key")
		if err := os.WriteFile(secret, []byte("key\n"), fileMode); err != nil {
			t.Fatal(err)
		}
		cs, s := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_WORKSPACE": ws, "CODE_EXEC_LANGUAGES": "python"}), connectOpts{})
		info := sandboxInfo(t, cs)
		want := fileFix + ws
		found := false
		for _, w := range info.Warnings {
			found = found || strings.Contains(w, "private.key") && strings.Contains(w, want)
		}
		if !found {
			t.Errorf("sandbox_info's warnings %q do not name private.key with %q", info.Warnings, want)
		}
		if !s.waitLog("private.key", 10*time.Second) {
			t.Errorf("the start-up log does not name private.key:\n%s", s.logTail())
		}
		res, out := execute(t, cs, map[string]any{"language": "python", "code": `import os; print(open(os.path.join(os.environ["WORKSPACE"], "notes.md")).read())`})
		if res.IsError || !strings.HasPrefix(out.Stdout, "# notes") {
			t.Errorf("reading a readable file of the workspace: isError=%v stdout=%q stderr=%q", res.IsError, out.Stdout, out.Stderr)
		}
	})
}
