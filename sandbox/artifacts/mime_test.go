package artifacts_test

import (
	"bytes"
	"image"
	"image/gif"
	"image/jpeg"
	"testing"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	img := image.NewGray(image.Rect(0, 0, 3, 3))
	var jpg, gf bytes.Buffer
	if err := jpeg.Encode(&jpg, img, nil); err != nil {
		t.Fatal(err)
	}
	if err := gif.Encode(&gf, img, nil); err != nil {
		t.Fatal(err)
	}
	webp := append([]byte("RIFF\x24\x00\x00\x00WEBPVP8 "), make([]byte, 24)...)
	const svgNS = `xmlns="http://www.w3.org/2000/svg"`
	tests := []struct {
		name, file string
		data       []byte
		want       artifacts.MIME
	}{
		{"png", "chart.png", pngBytes(t, 2, 2), artifacts.MIME{Type: "image/png", Image: true}},
		{"png with another name", "data.txt", pngBytes(t, 2, 2), artifacts.MIME{Type: "image/png", Image: true}},
		{"jpeg", "photo.jpg", jpg.Bytes(), artifacts.MIME{Type: "image/jpeg", Image: true}},
		{"gif", "anim", gf.Bytes(), artifacts.MIME{Type: "image/gif", Image: true}},
		{"webp", "x.webp", webp, artifacts.MIME{Type: "image/webp", Image: true}},
		{"svg", "plot.svg", []byte(`<svg ` + svgNS + `><rect/></svg>`), artifacts.MIME{Type: "image/svg+xml", Image: true, Text: true}},
		{"svg with prolog, comment and doctype", "plot", []byte("\xef\xbb\xbf\n<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- matplotlib -->\n<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" \"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\">\n<svg " + svgNS + " width=\"10\"></svg>"), artifacts.MIME{Type: "image/svg+xml", Image: true, Text: true}},
		{"svg with a prefix", "p.svg", []byte(`<svg:svg xmlns:svg="http://www.w3.org/2000/svg"/>`), artifacts.MIME{Type: "image/svg+xml", Image: true, Text: true}},
		{"not svg: another root", "page.svg", []byte(`<html><svg/></html>`), artifacts.MIME{Type: "text/plain", Text: true}},
		{"not svg: a longer name", "x.xml", []byte(`<svgfoo/>`), artifacts.MIME{Type: "application/xml", Text: true}},
		{"not svg: text first", "x.txt", []byte(`hello <svg/>`), artifacts.MIME{Type: "text/plain", Text: true}},
		{"text named like an image", "chart.png", []byte("not a picture"), artifacts.MIME{Type: "text/plain", Text: true}},
		{"csv", "data.CSV", []byte("a,b\n"), artifacts.MIME{Type: "text/csv", Text: true}},
		{"json", "out.json", []byte(`{"a":1}`), artifacts.MIME{Type: "application/json", Text: true}},
		{"markdown", "README.md", []byte("# hi"), artifacts.MIME{Type: "text/markdown", Text: true}},
		{"html", "report.html", []byte("<!doctype html><p>hi"), artifacts.MIME{Type: "text/html", Text: true}},
		{"utf-8 text", "notes", []byte("naïve café ✓"), artifacts.MIME{Type: "text/plain", Text: true}},
		{"empty", "empty.txt", nil, artifacts.MIME{Type: "text/plain", Text: true}},
		{"NUL byte", "x.txt", []byte("a\x00b"), artifacts.MIME{Type: "application/octet-stream"}},
		{"latin-1", "x.txt", []byte("caf\xe9"), artifacts.MIME{Type: "application/octet-stream"}},
		{"pdf", "report.pdf", []byte("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), artifacts.MIME{Type: "application/pdf"}},
		{"zip", "a.zip", []byte("PK\x03\x04\x14\x00\x00\x00"), artifacts.MIME{Type: "application/zip"}},
		{"xlsx is a zip", "t.xlsx", []byte("PK\x03\x04\x14\x00\x00\x00"), artifacts.MIME{Type: "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"}},
		{"gzip", "a.gz", []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"), artifacts.MIME{Type: "application/x-gzip"}},
		{"npy", "a.npy", []byte("\x93NUMPY\x01\x00v\x00"), artifacts.MIME{Type: "application/x-npy"}},
		{"unknown binary", "blob", []byte{0xde, 0xad, 0xbe, 0xef, 0}, artifacts.MIME{Type: "application/octet-stream"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := artifacts.Classify(tt.file, tt.data); got != tt.want {
				t.Errorf("Classify(%q) = %+v, want %+v", tt.file, got, tt.want)
			}
		})
	}
}
