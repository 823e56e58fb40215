package artifacts_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

func TestDecodeAcceptsRelativePaths(t *testing.T) {
	t.Parallel()
	raw := []byte{0, 1, 2, 0xff, 'x'}
	files := []artifacts.File{
		{Path: "data.csv", Content: "a,b\n1,2\n"},
		{Path: "./in/sub//deep.txt", Content: "héllo", Encoding: "UTF-8"},
		{Path: "bin/raw.bin", Content: base64.StdEncoding.EncodeToString(raw), Encoding: "base64"},
		{Path: "bin/unpadded.bin", Content: base64.RawStdEncoding.EncodeToString([]byte("ab")), Encoding: "base64"},
		{Path: "bin/wrapped.bin", Content: "aGVs\nbG8=\n", Encoding: "base64"},
		{Path: "empty", Content: ""},
		{Path: ".hidden", Content: "h", Encoding: "utf8"},
		{Path: "a..b/c...d", Content: "dots inside names are fine"},
		{Path: "données/été 2024.csv", Content: "x"},
	}
	got, err := artifacts.Decode(files, artifacts.InputLimits{MaxFiles: 10, MaxFileBytes: 100, MaxTotalBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want := []artifacts.Input{
		{Path: "data.csv", Data: []byte("a,b\n1,2\n")},
		{Path: "in/sub/deep.txt", Data: []byte("héllo")},
		{Path: "bin/raw.bin", Data: raw},
		{Path: "bin/unpadded.bin", Data: []byte("ab")},
		{Path: "bin/wrapped.bin", Data: []byte("hello")},
		{Path: "empty", Data: []byte{}},
		{Path: ".hidden", Data: []byte("h")},
		{Path: "a..b/c...d", Data: []byte("dots inside names are fine")},
		{Path: "données/été 2024.csv", Data: []byte("x")},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d inputs, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Path != want[i].Path || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Errorf("input %d = %q %q, want %q %q", i, got[i].Path, got[i].Data, want[i].Path, want[i].Data)
		}
	}
}

func TestDecodeRejectsBadFilesWithOneSentence(t *testing.T) {
	t.Parallel()
	lim := artifacts.InputLimits{MaxFiles: 3, MaxFileBytes: 10, MaxTotalBytes: 16}
	f := func(p string) artifacts.File { return artifacts.File{Path: p, Content: "x"} }
	tests := []struct {
		name      string
		files     []artifacts.File
		want      string // in the message
		overLimit bool
	}{
		{"empty path", []artifacts.File{f("")}, `files[0] "": has an empty path`, false},
		{"NUL byte", []artifacts.File{f("a\x00b")}, `files[0] "a\x00b": contains a NUL byte`, false},
		{"newline", []artifacts.File{f("a\nb")}, "contains a control character", false},
		{"invalid UTF-8", []artifacts.File{f("a\xffb")}, "is not valid UTF-8", false},
		{"backslash", []artifacts.File{f(`a\b`)}, "contains a backslash", false},
		{"absolute", []artifacts.File{f("/etc/passwd")}, `files[0] "/etc/passwd": is an absolute path`, false},
		{"dot dot alone", []artifacts.File{f("..")}, `contains ".."`, false},
		{"dot dot first", []artifacts.File{f("../escape")}, `contains ".."`, false},
		{"dot dot inside", []artifacts.File{f("a/../b")}, `contains ".."`, false},
		{"dot dot that stays inside", []artifacts.File{f("a/b/../c")}, `contains ".."`, false},
		{"dot dot last", []artifacts.File{f("a/..")}, `contains ".."`, false},
		{"folder", []artifacts.File{f("a/")}, "names a folder", false},
		{"working directory", []artifacts.File{f(".")}, "names the working directory itself", false},
		{"working directory dotted", []artifacts.File{f("./.")}, "names the working directory itself", false},
		{"long element", []artifacts.File{f(strings.Repeat("n", 256))}, "longer than 255 bytes", false},
		{"long path", []artifacts.File{f(strings.Repeat("dir/", 300) + "f")}, "longer than 1024 bytes", false},
		{"duplicate", []artifacts.File{f("a.txt"), f("a.txt")}, `files[1] "a.txt": names the same file as files[0] "a.txt"`, false},
		{"duplicate after cleaning", []artifacts.File{f("d/a.txt"), f("./d//a.txt")}, `files[1] "./d//a.txt": names the same file as files[0] "d/a.txt"`, false},
		{"file then folder of it", []artifacts.File{f("a"), f("a/b")}, `files[1] "a/b": needs "a" to be a folder, but files[0] is a file`, false},
		{"deep file then folder of it", []artifacts.File{f("a/b"), f("a/b/c/d")}, `needs "a/b" to be a folder, but files[0]`, false},
		{"folder then file of its name", []artifacts.File{f("a/b/c"), f("a/b")}, `files[1] "a/b": is a folder of files[0] "a/b/c"`, false},
		{"bad base64", []artifacts.File{{Path: "x.bin", Content: "not*base64", Encoding: "base64"}}, "is not valid base64 (at byte 3)", false},
		{"unknown encoding", []artifacts.File{{Path: "x.txt", Content: "x", Encoding: "latin1"}}, `has the unknown encoding "latin1"; use "utf-8" or "base64"`, false},
		{"too many", []artifacts.File{f("1"), f("2"), f("3"), f("4")}, "files: 4 files were sent, over the limit of 3", true},
		{"one too large", []artifacts.File{{Path: "big", Content: strings.Repeat("x", 11)}}, `files[0] "big": is 11 B, over the limit of 10 B per file`, true},
		{"too large decoded", []artifacts.File{{Path: "big", Content: base64.StdEncoding.EncodeToString(make([]byte, 11)), Encoding: "base64"}}, "is 11 B, over the limit", true},
		{"together too large", []artifacts.File{{Path: "a", Content: "123456789"}, {Path: "b", Content: "123456789"}}, "files: the 2 files add up to 18 B, over the limit of 16 B", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := artifacts.Decode(tt.files, lim)
			if err == nil {
				t.Fatalf("Decode accepted %q: %v", tt.files, got)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not contain %q", msg, tt.want)
			}
			if !errors.Is(err, artifacts.ErrInvalidFile) {
				t.Errorf("error %q does not wrap ErrInvalidFile", msg)
			}
			if got := errors.Is(err, artifacts.ErrFilesOverLimit); got != tt.overLimit {
				t.Errorf("errors.Is(%q, ErrFilesOverLimit) = %v, want %v", msg, got, tt.overLimit)
			}
			// One sentence: a single line, the advice after a semicolon.
			if strings.ContainsAny(msg, "\n\r") || strings.Contains(msg, ". ") {
				t.Errorf("error %q is not one sentence", msg)
			}
		})
	}
}

func TestDecodeWithoutLimits(t *testing.T) {
	t.Parallel()
	files := make([]artifacts.File, 50)
	for i := range files {
		files[i] = artifacts.File{Path: fmt.Sprintf("d%d/f%d", i%5, i), Content: strings.Repeat("x", 1000)}
	}
	if _, err := artifacts.Decode(files, artifacts.InputLimits{}); err != nil {
		t.Fatalf("zero limits mean no caps, got %v", err)
	}
}

func TestCleanPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a":          "a",
		"./a":        "a",
		"a//b":       "a/b",
		"a/./b":      "a/b",
		"./a/./b/./": "", // a folder
		"...":        "...",
	} {
		got, reason := artifacts.CleanPath(in)
		if got != want {
			t.Errorf("CleanPath(%q) = %q (%s), want %q", in, got, reason, want)
		}
		if (got == "") == (reason == "") {
			t.Errorf("CleanPath(%q) = %q, %q: want exactly one of them", in, got, reason)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		0:             "0 B",
		1023:          "1023 B",
		1024:          "1.0 KiB",
		1536:          "1.5 KiB",
		16 << 20:      "16.0 MiB",
		5 << 30:       "5.0 GiB",
		3 << 40:       "3.0 TiB",
		1<<50 + 1<<49: "1.5 PiB",
	} {
		if got := artifacts.FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
