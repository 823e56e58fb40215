package artifacts_test

import (
	"archive/tar"
	"bytes"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

func decode(t *testing.T, files ...artifacts.File) []artifacts.Input {
	t.Helper()
	in, err := artifacts.Decode(files, artifacts.InputLimits{})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// write makes the file p (with its folders) below dir.
func write(t *testing.T, dir, p string, data []byte) {
	t.Helper()
	full := filepath.Join(dir, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := 0; x < w; x++ {
		img.Set(x, x%h, color.RGBA{R: uint8(x), A: 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func paths(c *artifacts.Collection) []string {
	var out []string
	for _, a := range c.Artifacts {
		out = append(out, a.Path)
	}
	return out
}

func omitted(c *artifacts.Collection) map[string]string {
	out := make(map[string]string)
	for _, o := range c.Omitted {
		out[o.Path] = o.Reason
	}
	return out
}

// tarWriter writes the test tar streams, including entries that Archive
// never makes.
type tarWriter struct {
	tw *tar.Writer
}

func newTar(w io.Writer) *tarWriter { return &tarWriter{tw: tar.NewWriter(w)} }

func (w *tarWriter) header(h *tar.Header) {
	h.ModTime = time.Unix(1700000000, 0)
	h.Mode = 0o644
	if err := w.tw.WriteHeader(h); err != nil {
		panic(err)
	}
}

func (w *tarWriter) dir(name string) { w.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/"}) }

func (w *tarWriter) file(name, content string) {
	w.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(content))})
	if _, err := w.tw.Write([]byte(content)); err != nil {
		panic(err)
	}
}

func (w *tarWriter) symlink(name, target string) {
	w.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target})
}

func (w *tarWriter) hardlink(name, target string) {
	w.header(&tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target})
}

func (w *tarWriter) close() {
	if err := w.tw.Close(); err != nil {
		panic(err)
	}
}
