//go:build unix

package artifacts_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

func TestCollectReturnsWhatTheRunCreatedOrChanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := decode(t,
		artifacts.File{Path: "data.csv", Content: "a,b\n1,2\n"},
		artifacts.File{Path: "same.txt", Content: "unchanged"},
		artifacts.File{Path: "rewritten.txt", Content: "same bytes"},
		artifacts.File{Path: "edited.txt", Content: "12345"},
	)
	before, err := artifacts.Write(dir, in, artifacts.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The run: reads data.csv, rewrites one file with the same bytes, edits
	// one in place (same size), makes new files and folders.
	write(t, dir, "rewritten.txt", []byte("same bytes"))
	write(t, dir, "edited.txt", []byte("54321"))
	// Written later than the files came in, as a run writes them (a test
	// is quicker than the file system's clock can tell).
	later := time.Now().Add(time.Minute)
	for _, f := range []string{"rewritten.txt", "edited.txt"} {
		if err := os.Chtimes(filepath.Join(dir, f), later, later); err != nil {
			t.Fatal(err)
		}
	}
	chart := pngBytes(t, 40, 30)
	write(t, dir, "chart.png", chart)
	write(t, dir, "out/summary.json", []byte(`{"rows": 1}`))
	write(t, dir, "out/empty.txt", nil)
	write(t, dir, "blob.bin", []byte{0, 1, 2, 3})

	c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, before, artifacts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"blob.bin", "chart.png", "edited.txt", "out/empty.txt", "out/summary.json"}
	if got := paths(c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("artifacts %v, want %v", got, want)
	}
	if len(c.Omitted) != 0 || c.Note() != "" {
		t.Errorf("nothing should be left out: %v %q", c.Omitted, c.Note())
	}
	byPath := make(map[string]artifacts.Artifact)
	for _, a := range c.Artifacts {
		byPath[a.Path] = a
	}
	sum := sha256.Sum256(chart)
	png := byPath["chart.png"]
	if png.Kind != artifacts.KindImage || png.MIMEType != "image/png" || png.Size != int64(len(chart)) ||
		png.SHA256 != hex.EncodeToString(sum[:]) || !bytes.Equal(png.Data, chart) {
		t.Errorf("chart.png = %v %s %d %s, want an image/png of %d bytes with its digest", png.Kind, png.MIMEType, png.Size, png.SHA256, len(chart))
	}
	if j := byPath["out/summary.json"]; j.Kind != artifacts.KindText || j.MIMEType != "application/json" || string(j.Data) != `{"rows": 1}` {
		t.Errorf("summary.json = %v %s %q", j.Kind, j.MIMEType, j.Data)
	}
	if e := byPath["out/empty.txt"]; e.Kind != artifacts.KindText || e.Size != 0 || e.SHA256 != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("empty.txt = %v %d %s", e.Kind, e.Size, e.SHA256)
	}
	if b := byPath["blob.bin"]; b.Kind != artifacts.KindLink || b.MIMEType != "application/octet-stream" {
		t.Errorf("blob.bin = %v %s", b.Kind, b.MIMEType)
	}
}

func TestCollectAfterTakeUsesSizesAndTimes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "old.txt", []byte("old"))
	write(t, dir, "touched.txt", []byte("abc"))
	write(t, dir, "grown.txt", []byte("abc"))
	before, err := artifacts.Take(artifacts.DirSource{Dir: dir}, artifacts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "touched.txt"), later, later); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "grown.txt", []byte("abcdef"))
	write(t, dir, "new.txt", []byte("new"))
	c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, before, artifacts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(paths(c)), "[grown.txt new.txt touched.txt]"; got != want {
		t.Errorf("artifacts %s, want %s", got, want)
	}
}

func TestCollectNeverFollowsLinksOrReadsSpecialFiles(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	write(t, outside, "secret.txt", []byte("host secret"))
	write(t, outside, "dir/inner.txt", []byte("host secret too"))
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(dir, "link.txt")))
	must(os.Symlink(filepath.Join(outside, "dir"), filepath.Join(dir, "linkdir")))
	must(os.Symlink("/nonexistent", filepath.Join(dir, "dangling")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	write(t, dir, "real.txt", []byte("made by the run"))

	done := make(chan struct{})
	var c *artifacts.Collection
	var err error
	go func() {
		defer close(done)
		c, err = artifacts.Collect(artifacts.DirSource{Dir: dir}, artifacts.Snapshot{}, artifacts.Options{})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Collect blocked (on the FIFO?)")
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(paths(c)); got != "[real.txt]" {
		t.Errorf("artifacts %s, want [real.txt]", got)
	}
	for _, a := range c.Artifacts {
		if strings.Contains(string(a.Data), "host secret") {
			t.Errorf("%s holds a host file's content", a.Path)
		}
	}
	want := map[string]string{
		"dangling": "a symbolic link, not followed",
		"fifo":     "a special file, not followed",
		"link.txt": "a symbolic link, not followed",
		"linkdir":  "a symbolic link, not followed",
	}
	if got := omitted(c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("omitted %v, want %v", got, want)
	}
	if note := c.Note(); !strings.HasPrefix(note, "4 files were left out: dangling (a symbolic link, not followed); fifo (a special file, not followed);") {
		t.Errorf("note %q", note)
	}
}

// A run that swaps a listed file for a link before it is read gets nothing
// from the link's target.
func TestDirSourceRefusesAFileSwappedForALink(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	write(t, outside, "secret.txt", []byte("host secret"))
	dir := t.TempDir()
	write(t, dir, "a.txt", []byte("harmless"))
	err := artifacts.DirSource{Dir: dir}.Walk(func(e artifacts.Entry, open artifacts.Opener) error {
		if e.Path != "a.txt" {
			return nil
		}
		if err := os.Remove(filepath.Join(dir, "a.txt")); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(dir, "a.txt")); err != nil {
			return err
		}
		r, err := open()
		if err == nil {
			b, _ := io.ReadAll(r)
			r.Close()
			return fmt.Errorf("opened the swapped file and read %q", b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A regular file swapped for another regular file is refused too.
	write(t, dir, "b.txt", []byte("first"))
	err = artifacts.DirSource{Dir: dir}.Walk(func(e artifacts.Entry, open artifacts.Opener) error {
		if e.Path != "b.txt" {
			return nil
		}
		write(t, outside, "c.txt", []byte("other"))
		if err := os.Rename(filepath.Join(outside, "c.txt"), filepath.Join(dir, "b.txt")); err != nil {
			return err
		}
		if _, err := open(); err == nil || !strings.Contains(err.Error(), "replaced") {
			return fmt.Errorf("open of a replaced file: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCollectCaps(t *testing.T) {
	t.Parallel()
	t.Run("count", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for i := range 5 {
			write(t, dir, fmt.Sprintf("f%d.txt", i), []byte("x"))
		}
		c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, artifacts.Snapshot{}, artifacts.Options{MaxArtifacts: 3})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(paths(c)); got != "[f0.txt f1.txt f2.txt]" {
			t.Errorf("artifacts %s", got)
		}
		if got := c.Note(); got != "2 files were left out: f3.txt (over the limit of 3 files); f4.txt (over the limit of 3 files)." {
			t.Errorf("note %q", got)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		write(t, dir, "a.bin", make([]byte, 600))
		write(t, dir, "b.bin", make([]byte, 600)) // does not fit after a
		write(t, dir, "c.bin", make([]byte, 400)) // fits
		c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, artifacts.Snapshot{}, artifacts.Options{MaxBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(paths(c)); got != "[a.bin c.bin]" {
			t.Errorf("artifacts %s", got)
		}
		if len(c.Omitted) != 1 || c.Omitted[0].Path != "b.bin" || c.Omitted[0].Size != 600 ||
			c.Omitted[0].Reason != "600 B, over the limit of 1000 B for all files together" {
			t.Errorf("omitted %+v", c.Omitted)
		}
	})
	t.Run("entries", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for i := range 10 {
			write(t, dir, fmt.Sprintf("f%02d", i), []byte("x"))
		}
		c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, artifacts.Snapshot{}, artifacts.Options{MaxEntries: 4})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Artifacts) != 4 || !strings.Contains(c.Note(), "Stopped looking for files: the working directory holds more than 4 entries.") {
			t.Errorf("artifacts %v, note %q", paths(c), c.Note())
		}
	})
	t.Run("depth", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		write(t, dir, "a/b/c/d/deep.txt", []byte("x"))
		write(t, dir, "a/shallow.txt", []byte("x"))
		c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, artifacts.Snapshot{}, artifacts.Options{MaxDepth: 2})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(paths(c)); got != "[a/shallow.txt]" {
			t.Errorf("artifacts %s", got)
		}
		if got := omitted(c); got["a/b/c/"] != "a folder nested more than 2 deep" {
			t.Errorf("omitted %v", got)
		}
	})
	t.Run("many omissions", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for i := range 30 {
			write(t, dir, fmt.Sprintf("f%02d", i), []byte("x"))
		}
		c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, artifacts.Snapshot{}, artifacts.Options{MaxArtifacts: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Omitted) != 20 || c.OmittedMore != 9 {
			t.Errorf("%d omissions listed and %d more, want 20 and 9", len(c.Omitted), c.OmittedMore)
		}
		if !strings.HasPrefix(c.Note(), "29 files were left out: f01 (over the limit of 1 files)") || !strings.HasSuffix(c.Note(), "and 24 more.") {
			t.Errorf("note %q", c.Note())
		}
	})
}

func TestCollectIgnores(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, ".cache/matplotlib/fontlist.json", []byte("{}"))
	write(t, dir, "__pycache__/m.cpython-311.pyc", []byte{0})
	write(t, dir, ".hidden-file", []byte("kept"))
	write(t, dir, "main.py", []byte("print(1)"))
	write(t, dir, "out.txt", []byte("1"))
	c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, artifacts.Snapshot{}, artifacts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(paths(c)); got != "[.hidden-file main.py out.txt]" {
		t.Errorf("with DefaultIgnore: %s", got)
	}
	ignoreProgram := func(p string, isDir bool) bool {
		return p == "main.py" || artifacts.DefaultIgnore(p, isDir)
	}
	c, err = artifacts.Collect(artifacts.DirSource{Dir: dir}, artifacts.Snapshot{}, artifacts.Options{Ignore: ignoreProgram})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(paths(c)); got != "[.hidden-file out.txt]" {
		t.Errorf("ignoring main.py: %s", got)
	}
}

func TestCollectKinds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := pngBytes(t, 4, 4)
	big := pngBytes(t, 400, 300)
	write(t, dir, "small.png", small)
	write(t, dir, "big.png", big)
	write(t, dir, "short.csv", []byte("a,b\n"))
	write(t, dir, "long.csv", bytes.Repeat([]byte("a,b\n"), 100))
	opts := artifacts.Options{InlineImage: int64(len(small)), InlineText: 100}
	c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, artifacts.Snapshot{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]string)
	for _, a := range c.Artifacts {
		got[a.Path] = a.Kind.String() + " " + a.MIMEType
	}
	want := map[string]string{
		"big.png":   "link image/png",
		"long.csv":  "link text/csv",
		"short.csv": "text text/csv",
		"small.png": "image image/png",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
}

func TestCollectFromATarStream(t *testing.T) {
	t.Parallel()
	in := decode(t,
		artifacts.File{Path: "data.csv", Content: "a\n1\n"},
		artifacts.File{Path: "d/kept.txt", Content: "same"},
	)
	// What a container sends back: the inputs, one changed, new files, and
	// entries that must never become artifacts.
	var b bytes.Buffer
	tw := newTar(&b)
	tw.dir("d")
	tw.file("d/kept.txt", "same")
	tw.file("data.csv", "a\n1\n2\n")
	tw.file("plot.svg", `<?xml version="1.0"?><!-- made by hand --><svg xmlns="http://www.w3.org/2000/svg"/>`)
	tw.symlink("passwd", "/etc/passwd")
	tw.hardlink("hard", "data.csv")
	tw.file("../escape.txt", "x")
	tw.file("/abs.txt", "x")
	tw.dir(".cache")
	tw.file(".cache/junk", "x")
	tw.close()

	c, err := artifacts.Collect(artifacts.TarSource{R: &b}, artifacts.SnapshotOf(in), artifacts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(paths(c)); got != "[data.csv plot.svg]" {
		t.Errorf("artifacts %s", got)
	}
	for _, a := range c.Artifacts {
		if a.Path == "plot.svg" && (a.Kind != artifacts.KindImage || a.MIMEType != "image/svg+xml") {
			t.Errorf("plot.svg: %v %s", a.Kind, a.MIMEType)
		}
		if a.Path == "data.csv" && string(a.Data) != "a\n1\n2\n" {
			t.Errorf("data.csv: %q", a.Data)
		}
	}
	want := map[string]string{"hard": "a special file, not followed", "passwd": "a symbolic link, not followed"}
	if got := omitted(c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("omitted %v, want %v", got, want)
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	in := decode(t,
		artifacts.File{Path: "a/b/c.txt", Content: "c"},
		artifacts.File{Path: "a/d.txt", Content: "d"},
		artifacts.File{Path: "e.bin", Content: "AAEC", Encoding: "base64"},
	)
	var b bytes.Buffer
	if err := artifacts.Archive(&b, in, 10001, 10001, time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := artifacts.TarSource{R: &b}.Walk(func(e artifacts.Entry, open artifacts.Opener) error {
		s := e.Type.String() + " " + e.Path
		if open != nil {
			r, err := open()
			if err != nil {
				return err
			}
			data, _ := io.ReadAll(r)
			s += fmt.Sprintf(" %q", data)
		}
		got = append(got, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`folder a`, `folder a/b`, `regular file a/b/c.txt "c"`, `regular file a/d.txt "d"`, `regular file e.bin "\x00\x01\x02"`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tar holds\n%v\nwant\n%v", got, want)
	}
	// Unpacked by Collect's point of view: nothing changed.
	b.Reset()
	_ = artifacts.Archive(&b, in, 0, 0, time.Now())
	c, err := artifacts.Collect(artifacts.TarSource{R: &b}, artifacts.SnapshotOf(in), artifacts.Options{})
	if err != nil || len(c.Artifacts) != 0 || len(c.Omitted) != 0 {
		t.Errorf("the inputs alone should be no artifacts: %v %v %v", paths(c), c.Omitted, err)
	}
}

// TakeContents records digests: a file rewritten with the same bytes is not
// an artifact, one changed in place with the same size is.
func TestTakeContents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "same.txt", []byte("same"))
	write(t, dir, "edited.txt", []byte("1234"))
	before, err := artifacts.TakeContents(artifacts.DirSource{Dir: dir}, artifacts.Options{})
	if err != nil || before.Len() != 2 {
		t.Fatalf("TakeContents: %d entries, %v", before.Len(), err)
	}
	later := time.Now().Add(time.Minute)
	write(t, dir, "same.txt", []byte("same"))
	write(t, dir, "edited.txt", []byte("4321"))
	for _, p := range []string{"same.txt", "edited.txt"} {
		if err := os.Chtimes(filepath.Join(dir, p), later, later); err != nil {
			t.Fatal(err)
		}
	}
	c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, before, artifacts.Options{})
	if err != nil || fmt.Sprint(paths(c)) != "[edited.txt]" {
		t.Errorf("artifacts %v, %v; want [edited.txt]", paths(c), err)
	}
}

func TestCollectNextReportsAFileOnce(t *testing.T) {
	t.Parallel()
	listing := func(files map[string]string) *bytes.Buffer {
		var b bytes.Buffer
		tw := newTar(&b)
		for _, p := range slices.Sorted(maps.Keys(files)) {
			tw.file(p, files[p])
		}
		tw.close()
		return &b
	}
	in := decode(t, artifacts.File{Path: "in.csv", Content: "a\n"})
	// Call 1: the input (unchanged) and a new file.
	c, next, err := artifacts.CollectNext(artifacts.TarSource{R: listing(map[string]string{"in.csv": "a\n", "out.txt": "1"})}, artifacts.SnapshotOf(in), artifacts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(paths(c)); got != "[out.txt]" {
		t.Fatalf("call 1: %s", got)
	}
	// Call 2 lists both again, unchanged, and a new one.
	c, next, err = artifacts.CollectNext(artifacts.TarSource{R: listing(map[string]string{"in.csv": "a\n", "out.txt": "1", "new.txt": "n"})}, next, artifacts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(paths(c)); got != "[new.txt]" {
		t.Fatalf("call 2: %s", got)
	}
	// Call 3: all listed again, out.txt changed.
	c, _, err = artifacts.CollectNext(artifacts.TarSource{R: listing(map[string]string{"in.csv": "a\n", "out.txt": "2", "new.txt": "n"})}, next, artifacts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(paths(c)); got != "[out.txt]" {
		t.Fatalf("call 3: %s", got)
	}
}

// TestCollectListsUnsafeNames: files whose names hold control characters
// (an escape sequence, a newline, a tab, DEL, a C1 control, a line
// separator, a bidirectional override), bytes that are not UTF-8, or a
// backslash are not artifacts (their URIs could not be read back), and
// are listed as left out, with their names escaped so that they can neither
// repaint a terminal nor forge lines, from a directory (process mode, none)
// and from a tar stream (docker mode) alike. A folder with such a name is
// listed, not looked into; a session's next call does not list them again.
func TestCollectListsUnsafeNames(t *testing.T) {
	t.Parallel()
	names := map[string]string{ // name -> how it is listed
		"esc\x1b[2Jx.txt":   `esc\x1b[2Jx.txt`,
		"new\nline.txt":     `new\nline.txt`,
		"tab\t.txt":         `tab\t.txt`,
		"del\x7f.txt":       `del\x7f.txt`,
		"csi\u009b2J.txt":   `csi\u009b2J.txt`,
		"sep\u2028.txt":     `sep\u2028.txt`,
		"rtl\u202etxt.exe":  `rtl\u202etxt.exe`,
		"bad\xff.txt":       `bad\xff.txt`,
		`back\slash.txt`:    `back\\slash.txt`,
		"d\x1b]0;title\x07": `d\x1b]0;title\a/`,
	}
	check := func(t *testing.T, c *artifacts.Collection) {
		t.Helper()
		if got := fmt.Sprint(paths(c)); got != "[ok.txt]" {
			t.Errorf("artifacts %q, want only ok.txt", paths(c))
		}
		got := omitted(c)
		for name, listed := range names {
			reason, ok := got[listed]
			if !ok {
				t.Errorf("%q is not listed as %q among the left out: %q", name, listed, got)
				continue
			}
			if !strings.Contains(reason, "name") || !strings.Contains(reason, "escaped") {
				t.Errorf("%q left out because %q, want the reason to say the name is shown escaped", name, reason)
			}
		}
		for path := range got {
			if strings.IndexFunc(path, func(r rune) bool {
				return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x202e
			}) >= 0 || !utf8.ValidString(path) {
				t.Errorf("the listing holds %q unescaped", path)
			}
		}
		if note := c.Note(); strings.ContainsAny(note, "\x1b\n\t\x07") {
			t.Errorf("the note holds a control character: %q", note)
		}
	}
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		write(t, dir, "ok.txt", []byte("ok"))
		for name := range names {
			if strings.HasPrefix(name, "d\x1b") {
				write(t, dir, name+"/inside.txt", []byte("x"))
				continue
			}
			write(t, dir, name, []byte("x"))
		}
		src := artifacts.DirSource{Dir: dir}
		c, next, err := artifacts.CollectNext(src, artifacts.Snapshot{}, artifacts.Options{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, c)
		again, _, err := artifacts.CollectNext(src, next, artifacts.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Artifacts)+len(again.Omitted) != 0 {
			t.Errorf("the next call lists them again: %q %v", paths(again), again.Omitted)
		}
	})
	t.Run("tar stream", func(t *testing.T) {
		t.Parallel()
		var b bytes.Buffer
		tw := newTar(&b)
		tw.file("ok.txt", "ok")
		for name := range names {
			if strings.HasPrefix(name, "d\x1b") {
				tw.dir(name)
				tw.file(name+"/inside.txt", "x")
				continue
			}
			tw.file(name, "x")
		}
		tw.close()
		c, err := artifacts.Collect(artifacts.TarSource{R: &b}, artifacts.Snapshot{}, artifacts.Options{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, c)
	})
}
