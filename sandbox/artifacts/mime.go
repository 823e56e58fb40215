package artifacts

import (
	"bytes"
	"encoding/xml"
	"path"
	"strings"
	"unicode/utf8"
)

// MIME is what Classify found out about a file.
type MIME struct {
	// Type is the media type without parameters, such as "image/png",
	// "text/csv" or "application/octet-stream".
	Type string
	// Image is set for PNG, JPEG, GIF, WebP and SVG images.
	Image bool
	// Text is set for UTF-8 text without NUL bytes (SVG included).
	Text bool
}

// Classify tells a file's media type from its content, and for text from
// its name too (a CSV file and a Python file are both just UTF-8 text to a
// sniffer). Images are recognised by content only: a PNG named data.txt is
// an image, and a text file named chart.png is text. The result depends on
// nothing but the arguments (not on the host's MIME tables).
func Classify(name string, data []byte) MIME {
	head := data
	if len(head) > 512 {
		head = head[:512]
	}
	sniffed := sniffBinary(head)
	switch sniffed {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return MIME{Type: sniffed, Image: true}
	}
	text := isText(data)
	if text && isSVG(data) {
		return MIME{Type: "image/svg+xml", Image: true, Text: true}
	}
	ext := strings.ToLower(path.Ext(name))
	if text {
		if t, ok := textTypes[ext]; ok {
			return MIME{Type: t, Text: true}
		}
		return MIME{Type: "text/plain", Text: true}
	}
	if t, ok := binaryTypes[ext]; ok && (sniffed == "application/zip" || sniffed == "") {
		return MIME{Type: t} // an .xlsx file is a zip file, more precisely
	}
	if sniffed != "" {
		return MIME{Type: sniffed}
	}
	return MIME{Type: "application/octet-stream"}
}

// isText: valid UTF-8 without NUL bytes (which no text format uses).
func isText(data []byte) bool {
	return bytes.IndexByte(data, 0) < 0 && utf8.Valid(data)
}

// isSVG reports whether the first element of an XML document is <svg>,
// looking at no more than the first 64 KiB (prolog, comments, doctype).
func isSVG(data []byte) bool {
	if len(data) > 64<<10 {
		data = data[:64<<10]
	}
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), " \t\r\n")
	if !bytes.HasPrefix(trimmed, []byte("<")) {
		return false
	}
	d := xml.NewDecoder(bytes.NewReader(trimmed))
	d.Strict = false
	for {
		tok, err := d.RawToken()
		if err != nil {
			return false
		}
		switch t := tok.(type) {
		case xml.StartElement:
			return t.Name.Local == "svg"
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return false
			}
		case xml.ProcInst, xml.Comment, xml.Directive:
		default:
			return false
		}
	}
}

// textTypes are the media types of text files by extension.
var textTypes = map[string]string{
	".csv":      "text/csv",
	".tsv":      "text/tab-separated-values",
	".txt":      "text/plain",
	".log":      "text/plain",
	".md":       "text/markdown",
	".markdown": "text/markdown",
	".html":     "text/html",
	".htm":      "text/html",
	".css":      "text/css",
	".js":       "text/javascript",
	".mjs":      "text/javascript",
	".py":       "text/x-python",
	".sh":       "text/x-shellscript",
	".json":     "application/json",
	".jsonl":    "application/jsonl",
	".ndjson":   "application/x-ndjson",
	".geojson":  "application/geo+json",
	".ipynb":    "application/x-ipynb+json",
	".xml":      "application/xml",
	".yaml":     "application/yaml",
	".yml":      "application/yaml",
	".toml":     "application/toml",
	".sql":      "application/sql",
	".tex":      "text/x-tex",
}

// binaryTypes are the media types of binary files that content sniffing
// does not know, by extension.
var binaryTypes = map[string]string{
	".xlsx":    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
	".docx":    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
	".parquet": "application/vnd.apache.parquet",
	".npy":     "application/x-npy",
	".npz":     "application/zip",
	".pkl":     "application/x-python-pickle",
	".sqlite":  "application/vnd.sqlite3",
	".db":      "application/vnd.sqlite3",
}
