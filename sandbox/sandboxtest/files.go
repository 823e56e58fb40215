package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// inputs decodes files for a request, failing the test on a bad one.
func inputs(t *testing.T, files ...artifacts.File) []artifacts.Input {
	t.Helper()
	in, err := artifacts.Decode(files, artifacts.InputLimits{})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// artifactPaths lists the paths of a run's artifacts.
func artifactPaths(res *sandbox.Result) []string {
	if res.Artifacts == nil {
		return nil
	}
	var out []string
	for _, a := range res.Artifacts.Artifacts {
		out = append(out, a.Path)
	}
	return out
}

// filesSuite checks files in and artifacts out: every mode writes a
// request's files into the working directory before the program starts and
// brings back what the program created or changed there, never following a
// link, and never the program file itself.
func filesSuite(t *testing.T, rs *runnerSuite) {
	for _, c := range filesCases {
		t.Run(c.name, func(t *testing.T) { c.test(t, rs) })
	}
}

// The files that the files suite's cases send.
var (
	dataCSV   = artifacts.File{Path: "data.csv", Content: "city,temp\nOslo,3\nRome,18\n"}
	notesFile = artifacts.File{Path: "in/notes.txt", Content: "keep me"}
)

// filesCases are the files suite's cases, in the order they run; each is a
// subtest of the runner suite's "files in, artifacts out".
var filesCases = []runnerCase{
	{name: "every language reads the files", test: filesEveryLanguageReadsTheFiles},
	{name: "created and changed files come back", test: filesCreatedAndChangedFilesComeBack},
	{name: "links and special files are not followed", test: filesLinksAndSpecialFilesAreNotFollowed},
	{name: "names with control characters are listed escaped, not brought back", test: filesNamesWithControlCharactersAreListedEscapedNotBroughtBack},
	{name: "caps leave files out with a note", test: filesCapsLeaveFilesOutWithANote},
	{name: "large artifacts come back whole", test: filesLargeArtifactsComeBackWhole},
	{name: "no artifacts unless asked", test: filesNoArtifactsUnlessAsked},
	{name: "the program file cannot be replaced", test: filesTheProgramFileCannotBeReplaced},
}

// filesEveryLanguageReadsTheFiles is the case "every language reads the files".
func filesEveryLanguageReadsTheFiles(t *testing.T, rs *runnerSuite) {
	cases := []struct{ lang, code string }{
		{"python", "print(open('data.csv').read().splitlines()[2]); print(open('in/notes.txt').read())"},
		{"javascript", "const fs = require('fs'); console.log(fs.readFileSync('data.csv', 'utf8').split('\\n')[2]); console.log(fs.readFileSync('in/notes.txt', 'utf8'))"},
		{"bash", "sed -n 3p data.csv; cat in/notes.txt; echo"},
	}
	for _, c := range cases {
		t.Run(c.lang, func(t *testing.T) {
			rs.need(t, c.lang)
			req := Req(c.lang, c.code)
			req.Files = inputs(t, dataCSV, notesFile)
			req.Artifacts = &artifacts.Options{}
			res := rs.run(t, req)
			if res.ExitCode != 0 || res.Stdout != "Rome,18\nkeep me\n" {
				t.Fatalf("exit=%d stdout=%q stderr=%q", res.ExitCode, res.Stdout, res.Stderr)
			}
			if res.Artifacts == nil || len(res.Artifacts.Artifacts) != 0 || len(res.Artifacts.Omitted) != 0 {
				t.Errorf("files only read are artifacts: %v %+v", artifactPaths(res), res.Artifacts)
			}
		})
	}
}

// filesCreatedAndChangedFilesComeBack is the case "created and changed files come back".
func filesCreatedAndChangedFilesComeBack(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	raw := make([]byte, 256)
	for i := range raw {
		raw[i] = byte(i)
	}
	req := Req("python", `
import os, shutil
os.makedirs("out/deep", exist_ok=True)
open("out/deep/summary.json", "w").write('{"rows": 2}')
open("in/notes.txt", "a").write(" and more")
shutil.copy("raw.bin", "copy.bin")
open("empty.txt", "w").close()
print(sorted(os.listdir(".")))
`)
	req.Files = inputs(t, dataCSV, notesFile, artifacts.File{Path: "raw.bin", Content: "", Encoding: "base64"})
	req.Files[2].Data = raw
	req.Artifacts = &artifacts.Options{}
	res := rs.run(t, req)
	if res.ExitCode != 0 {
		t.Fatalf("exit=%d stderr=%q", res.ExitCode, res.Stderr)
	}
	want := []string{"copy.bin", "empty.txt", "in/notes.txt", "out/deep/summary.json"}
	if got := artifactPaths(res); !slices.Equal(got, want) {
		t.Fatalf("artifacts %v, want %v (stdout %q)", got, want, res.Stdout)
	}
	for _, a := range res.Artifacts.Artifacts {
		switch a.Path {
		case "copy.bin":
			if !bytes.Equal(a.Data, raw) || a.Kind != artifacts.KindLink || a.MIMEType != "application/octet-stream" {
				t.Errorf("copy.bin: %d bytes, %v %s", len(a.Data), a.Kind, a.MIMEType)
			}
		case "in/notes.txt":
			if string(a.Data) != "keep me and more" || a.Kind != artifacts.KindText {
				t.Errorf("in/notes.txt: %q %v", a.Data, a.Kind)
			}
		case "out/deep/summary.json":
			if a.MIMEType != "application/json" || a.Size != 11 || len(a.SHA256) != 64 {
				t.Errorf("summary.json: %+v", a)
			}
		}
	}
}

// filesLinksAndSpecialFilesAreNotFollowed is the case "links and special files are not followed".
func filesLinksAndSpecialFilesAreNotFollowed(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	req := Req("python", `
import os
os.symlink("/etc/passwd", "passwd")
os.symlink("/etc", "etc")
os.mkfifo("fifo")
open("real.txt", "w").write("ok")
`)
	req.Artifacts = &artifacts.Options{}
	res := rs.run(t, req)
	if res.ExitCode != 0 {
		t.Fatalf("exit=%d stderr=%q", res.ExitCode, res.Stderr)
	}
	if got := artifactPaths(res); !slices.Equal(got, []string{"real.txt"}) {
		t.Fatalf("artifacts %v, want [real.txt]", got)
	}
	var omitted []string
	for _, o := range res.Artifacts.Omitted {
		omitted = append(omitted, o.Path)
		if !strings.Contains(o.Reason, "not followed") {
			t.Errorf("omission %+v", o)
		}
	}
	if !slices.Equal(omitted, []string{"etc", "fifo", "passwd"}) {
		t.Errorf("omitted %v, want [etc fifo passwd]", omitted)
	}
	for _, a := range res.Artifacts.Artifacts {
		if strings.Contains(string(a.Data), "root:") {
			t.Errorf("%s holds /etc/passwd", a.Path)
		}
	}
}

// filesNamesWithControlCharactersAreListedEscapedNotBroughtBack is the case "names with control characters are listed escaped, not brought back".
func filesNamesWithControlCharactersAreListedEscapedNotBroughtBack(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	req := Req("python", unsafeNamesProgram)
	req.Artifacts = &artifacts.Options{}
	res := rs.run(t, req)
	if res.ExitCode != 0 {
		t.Fatalf("exit=%d stderr=%q", res.ExitCode, res.Stderr)
	}
	CheckUnsafeNames(t, res.Artifacts)
}

// filesCapsLeaveFilesOutWithANote is the case "caps leave files out with a note".
func filesCapsLeaveFilesOutWithANote(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	req := Req("bash", "echo a > a.txt; echo b > b.txt; head -c 5000 /dev/zero > big.bin")
	req.Artifacts = &artifacts.Options{MaxArtifacts: 1, MaxBytes: 4096}
	res := rs.run(t, req)
	if got := artifactPaths(res); !slices.Equal(got, []string{"a.txt"}) {
		t.Fatalf("artifacts %v, want [a.txt]", got)
	}
	if note := res.Artifacts.Note(); !strings.Contains(note, "b.txt (over the limit of 1 files)") || !strings.Contains(note, "big.bin") {
		t.Errorf("note %q", note)
	}
}

// filesLargeArtifactsComeBackWhole is the case "large artifacts come back whole".
func filesLargeArtifactsComeBackWhole(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	req := Req("python", "open('big.bin', 'wb').write(bytes(range(256)) * 4096)\nopen('big.csv', 'w').write('x,y\\n' * 100000)")
	req.Artifacts = &artifacts.Options{}
	res := rs.run(t, req)
	if res.ExitCode != 0 {
		t.Fatalf("exit=%d stderr=%q", res.ExitCode, res.Stderr)
	}
	if got := artifactPaths(res); !slices.Equal(got, []string{"big.bin", "big.csv"}) {
		t.Fatalf("artifacts %v", got)
	}
	for _, a := range res.Artifacts.Artifacts {
		if (a.Path == "big.bin" && a.Size != 1<<20) || (a.Path == "big.csv" && a.Size != 400000) || int64(len(a.Data)) != a.Size || a.Kind != artifacts.KindLink {
			t.Errorf("%s: size %d, %d bytes of data, %v", a.Path, a.Size, len(a.Data), a.Kind)
		}
	}
}

// filesNoArtifactsUnlessAsked is the case "no artifacts unless asked".
func filesNoArtifactsUnlessAsked(t *testing.T, rs *runnerSuite) {
	rs.need(t, "bash")
	res := rs.run(t, Req("bash", "echo x > x.txt"))
	if res.Artifacts != nil {
		t.Errorf("artifacts without asking: %+v", res.Artifacts)
	}
}

// filesTheProgramFileCannotBeReplaced is the case "the program file cannot be replaced".
func filesTheProgramFileCannotBeReplaced(t *testing.T, rs *runnerSuite) {
	rs.need(t, "python")
	req := Req("python", "print(1)")
	req.Files = inputs(t, artifacts.File{Path: "main.py", Content: "print(2)"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := rs.r.Run(ctx, req)
	if !errors.Is(err, artifacts.ErrInvalidFile) || !strings.Contains(err.Error(), fmt.Sprintf("files[0] %q: is the name of the python program file", "main.py")) {
		t.Errorf("Run with a file named main.py: %v", err)
	}
}

// unsafeNamesProgram is a python program that makes ok.txt and files whose
// names an artifact listing must not show as they are (see
// CheckUnsafeNames).
const unsafeNamesProgram = `for name in ["esc\x1b[2J.txt", "line\nbreak.txt", "tab\t.txt", "rtl\u202etxt.exe", "ok.txt"]:
    open(name, "w").write("x")
open(b"bad\xff.txt", "wb").write(b"x")
`

// CheckUnsafeNames checks what a run of unsafeNamesProgram brought back:
// ok.txt only, and every other file listed as left out, its name escaped
// (so that it can neither repaint a terminal nor forge lines) with the
// reason.
func CheckUnsafeNames(t *testing.T, c *artifacts.Collection) {
	t.Helper()
	if c == nil {
		t.Fatal("no collection")
	}
	var got []string
	for _, a := range c.Artifacts {
		got = append(got, a.Path)
	}
	if !slices.Equal(got, []string{"ok.txt"}) {
		t.Errorf("artifacts %q, want [ok.txt]", got)
	}
	var omitted []string
	for _, o := range c.Omitted {
		omitted = append(omitted, o.Path)
		if !strings.Contains(o.Reason, "shown escaped") {
			t.Errorf("omission %+v does not say that the name is shown escaped", o)
		}
	}
	slices.Sort(omitted)
	if want := []string{`bad\xff.txt`, `esc\x1b[2J.txt`, `line\nbreak.txt`, `rtl\u202etxt.exe`, `tab\t.txt`}; !slices.Equal(omitted, want) {
		t.Errorf("left out %q, want %q", omitted, want)
	}
	if note := c.Note(); strings.ContainsAny(note, "\x1b\n\t\u202e") {
		t.Errorf("the note holds a control character: %q", note)
	}
}
