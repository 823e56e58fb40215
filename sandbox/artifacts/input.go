package artifacts

import (
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// File is one file that a request brings into its run, as the client sent it.
type File struct {
	// Path is relative to the run's working directory, with "/" between
	// folders.
	Path string `json:"path"`
	// Content is the file's text (Encoding utf-8) or its bytes in standard
	// base64 (Encoding base64).
	Content string `json:"content"`
	// Encoding is EncodingUTF8 (the default when empty) or EncodingBase64.
	Encoding string `json:"encoding,omitempty"`
}

// The encodings of File.Content.
const (
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// Encodings lists the accepted values of File.Encoding, for schemas.
var Encodings = []string{EncodingUTF8, EncodingBase64}

// InputLimits cap the files of one request. A zero field means no cap of
// that kind.
type InputLimits struct {
	// MaxFiles caps how many files one request may bring.
	MaxFiles int
	// MaxFileBytes caps the decoded size of any one file.
	MaxFileBytes int64
	// MaxTotalBytes caps the decoded size of all the files together.
	MaxTotalBytes int64
}

// Input is a checked, decoded file: Path is clean, relative and
// slash-separated, and names a file inside the working directory.
type Input struct {
	Path string
	Data []byte
}

// Limits on paths, whatever the operator's caps: a longer path is refused
// before it reaches the file system (which would refuse it less clearly).
const (
	maxPathBytes    = 1024
	maxElementBytes = 255
)

// Modes of what Write and Archive create: files readable by everyone,
// writable by their owner (the run's user).
const (
	fileMode = 0o644
	dirMode  = 0o755
)

// ErrInvalidFile is wrapped by every error of Decode and Write about a file
// the request sent.
var ErrInvalidFile = errors.New("invalid file")

// ErrFilesOverLimit is wrapped (with ErrInvalidFile) by the errors of Decode
// that a cap caused: too many files, a file or all of them too large.
var ErrFilesOverLimit = errors.New("files over limit")

// FileError is an error about the files of a request. Its message is one
// sentence that names the file (files[i] and its path) and says what to do.
type FileError struct {
	// Index is the file's position in the request, or -1 when the error is
	// about the files together.
	Index int
	// Path is the path as the request gave it.
	Path string
	// Reason is the sentence after the file's name.
	Reason string
	// Cap names the cap that caused the error, if one did.
	Cap Cap
}

// Cap names one of the caps of InputLimits.
type Cap uint8

// The caps of InputLimits (CapNone: the error is not about a cap).
const (
	CapNone       Cap = iota
	CapFiles          // MaxFiles
	CapFileBytes      // MaxFileBytes
	CapTotalBytes     // MaxTotalBytes
)

func (e *FileError) Error() string {
	if e.Index < 0 {
		return "files: " + e.Reason
	}
	return fmt.Sprintf("files[%d] %q: %s", e.Index, e.Path, e.Reason)
}

// Unwrap makes errors.Is find ErrInvalidFile, and ErrFilesOverLimit where a
// cap caused the error.
func (e *FileError) Unwrap() []error {
	if e.Cap != CapNone {
		return []error{ErrInvalidFile, ErrFilesOverLimit}
	}
	return []error{ErrInvalidFile}
}

// Decode checks the files of a request against lim and decodes them, in
// order. It rejects, each with a FileError: an empty path, a NUL byte or
// another control character, a backslash, an absolute path, a ".." element,
// a path that names a folder or the working directory itself, a path or
// element too long for a file system, two paths that name the same file
// (also after cleaning: "a//b" and "./a/b" are one file), a path that is a
// folder of another file ("a" and "a/b"), an unknown encoding, content that
// is not valid base64, and too many files or bytes for lim.
func Decode(files []File, lim InputLimits) ([]Input, error) {
	if lim.MaxFiles > 0 && len(files) > lim.MaxFiles {
		return nil, &FileError{Index: -1, Cap: CapFiles,
			Reason: fmt.Sprintf("%d files were sent, over the limit of %d; send fewer files", len(files), lim.MaxFiles)}
	}
	out := make([]Input, 0, len(files))
	// index of every file by clean path, and of the first file under every folder
	filesAt := make(map[string]int, len(files))
	foldersOf := make(map[string]int)
	var total int64
	for i, f := range files {
		fail := func(format string, a ...any) error {
			return &FileError{Index: i, Path: f.Path, Reason: fmt.Sprintf(format, a...)}
		}
		clean, reason := CleanPath(f.Path)
		if reason != "" {
			return nil, fail("%s", reason)
		}
		if j, ok := filesAt[clean]; ok {
			return nil, fail("names the same file as files[%d] %q; give every file a different path", j, files[j].Path)
		}
		if j, ok := foldersOf[clean]; ok {
			return nil, fail("is a folder of files[%d] %q, so it cannot be a file too", j, files[j].Path)
		}
		for dir := path.Dir(clean); dir != "."; dir = path.Dir(dir) {
			if j, ok := filesAt[dir]; ok {
				return nil, fail("needs %q to be a folder, but files[%d] is a file of that name", dir, j)
			}
		}
		data, err := decodeContent(f)
		if err != nil {
			return nil, fail("%s", err.Error())
		}
		if n := int64(len(data)); lim.MaxFileBytes > 0 && n > lim.MaxFileBytes {
			e := fail("is %s, over the limit of %s per file; send a smaller file", FormatBytes(n), FormatBytes(lim.MaxFileBytes))
			e.(*FileError).Cap = CapFileBytes
			return nil, e
		}
		total += int64(len(data))
		filesAt[clean] = i
		for dir := path.Dir(clean); dir != "."; dir = path.Dir(dir) {
			if _, ok := foldersOf[dir]; !ok {
				foldersOf[dir] = i
			}
		}
		out = append(out, Input{Path: clean, Data: data})
	}
	if lim.MaxTotalBytes > 0 && total > lim.MaxTotalBytes {
		return nil, &FileError{Index: -1, Cap: CapTotalBytes,
			Reason: fmt.Sprintf("the %d files add up to %s, over the limit of %s; send fewer or smaller files", len(files), FormatBytes(total), FormatBytes(lim.MaxTotalBytes))}
	}
	return out, nil
}

// CleanPath checks a path that a request gave for a file in the working
// directory and returns it cleaned ("./a//b" → "a/b"), or "" and the reason
// it is refused, as a sentence without a subject ("is absolute; ...").
func CleanPath(p string) (clean, reason string) {
	switch {
	case p == "":
		return "", "has an empty path; give the file a name such as \"data.csv\""
	case strings.IndexByte(p, 0) >= 0:
		return "", "contains a NUL byte, which no file name may hold"
	case !utf8.ValidString(p):
		return "", "is not valid UTF-8; use a UTF-8 file name"
	case strings.IndexFunc(p, isControl) >= 0:
		return "", "contains a control character (such as a newline, a tab or a bidirectional override); use printable characters only"
	case strings.Contains(p, `\`):
		return "", "contains a backslash; separate folders with \"/\""
	case strings.HasPrefix(p, "/"):
		return "", "is an absolute path; give the path relative to the working directory, such as \"data.csv\""
	case strings.HasSuffix(p, "/"):
		return "", "ends with \"/\", so it names a folder; give the path of a file"
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", "contains \"..\"; every path must stay inside the working directory"
		}
	}
	clean = path.Clean(p)
	switch {
	case clean == ".":
		return "", "names the working directory itself; give the path of a file"
	case len(clean) > maxPathBytes:
		return "", fmt.Sprintf("is longer than %d bytes; use a shorter path", maxPathBytes)
	}
	for _, el := range strings.Split(clean, "/") {
		if len(el) > maxElementBytes {
			return "", fmt.Sprintf("has a name longer than %d bytes; use shorter names", maxElementBytes)
		}
	}
	return clean, ""
}

// isControl reports whether r may change what a terminal or a reader shows
// around it: a control character (C0, DEL, C1: an escape sequence, a
// newline, a tab), a line or paragraph separator, or a bidirectional
// control (which reorders what follows it).
func isControl(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r)
}

// decodeContent returns f's bytes, or an error whose message completes the
// sentence "files[i] "path" ...".
func decodeContent(f File) ([]byte, error) {
	switch strings.ToLower(f.Encoding) {
	case "", EncodingUTF8, "utf8", "text":
		return []byte(f.Content), nil
	case EncodingBase64:
		data, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			// Base64 without its "=" padding is common enough to accept.
			if raw, rerr := base64.RawStdEncoding.DecodeString(f.Content); rerr == nil {
				return raw, nil
			}
			var ce base64.CorruptInputError
			if errors.As(err, &ce) {
				return nil, fmt.Errorf("has content that is not valid base64 (at byte %d); encode the bytes with standard base64", int64(ce))
			}
			return nil, errors.New("has content that is not valid base64; encode the bytes with standard base64")
		}
		return data, nil
	}
	return nil, fmt.Errorf("has the unknown encoding %q; use %q or %q", f.Encoding, EncodingUTF8, EncodingBase64)
}

// FormatBytes writes n for people: "512 B", "1.5 KiB", "12.0 MiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
