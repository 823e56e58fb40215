package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// summary is a summarised stream as a result shows it: the head, the
// omission line and the tail.
type summary struct {
	head, line, tail string
}

// splitSummary cuts shown at its omission line ("[… N bytes … left out …]"),
// or reports that it has none.
func splitSummary(shown string) (summary, bool) {
	i := strings.Index(shown, "[… ")
	if i < 0 {
		return summary{}, false
	}
	j := strings.Index(shown[i:], " …]\n")
	if j < 0 {
		return summary{}, false
	}
	end := i + j + len(" …]\n")
	return summary{head: shown[:i], line: shown[i:end], tail: shown[end:]}, true
}

// omittedOf decodes structuredContent's <stream>_omitted.
func omittedOf(t *testing.T, structured map[string]any, stream string) (bytes, lines int, uri string, ok bool) {
	t.Helper()
	m, ok := structured[stream+"_omitted"].(map[string]any)
	if !ok {
		return 0, 0, "", false
	}
	b, _ := m["bytes"].(float64)
	l, _ := m["lines"].(float64)
	u, _ := m["uri"].(string)
	return int(b), int(l), u, true
}

// TestLongOutputIsSummarised: a stdout or stderr longer than the head and
// the tail together comes back as its head, one line that says how much was
// left out and where the whole is, and its tail, in the text content and in
// structuredContent alike; the whole is a resource that resources/read
// serves to the client that ran the code, and to no other.
func TestLongOutputIsSummarised(t *testing.T) {
	const head, tail = 4 << 10, 4 << 10 // the sizes docs/tools.md promises
	cases := []struct {
		name, stdout, stderr string
		byLines              bool // the cuts fall between lines
	}{
		{name: "short", stdout: "hello\n", stderr: "careful\n"},
		{name: "exactly at the limit", stdout: strings.Repeat("x", head+tail-1) + "\n"},
		{name: "one byte over the limit", stdout: strings.Repeat("x", head+tail) + "\n"},
		{name: "many lines", stdout: sandboxtest.NumberedLines(20000), byLines: true},
		{name: "stderr alone", stdout: "ok\n", stderr: sandboxtest.NumberedLines(3000), byLines: true},
		{name: "both streams", stdout: sandboxtest.NumberedLines(1000), stderr: strings.Repeat("warning: deprecated\n", 1000), byLines: true},
		{name: "one line of 3-byte runes", stdout: strings.Repeat("€", 10000)},
		{name: "4-byte runes between lines", stdout: strings.Repeat("🙂🙂🙂 ok\n", 3000), byLines: true},
		{name: "a long line at each cut", stdout: "first\n" + strings.Repeat("é", 9000) + "\n" + strings.Repeat("ü", 9000) + "\nlast\n"},
		{name: "no final newline", stdout: strings.TrimSuffix(sandboxtest.NumberedLines(5000), "\n"), byLines: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
				return &sandbox.Result{Sandbox: sandbox.ModeProcess, Stdout: c.stdout, Stderr: c.stderr}, nil
			})
			alice := s.mcp.WithContext(context.Background(), fakeSession{id: "alice"})
			bob := s.mcp.WithContext(context.Background(), fakeSession{id: "bob"})
			res, err := s.handleExecute(alice, call(map[string]any{"language": "python", "code": "x"}))
			if err != nil || res.IsError {
				t.Fatalf("%v %s", err, resultText(res))
			}
			b, _ := json.Marshal(res.StructuredContent)
			var structured map[string]any
			if err := json.Unmarshal(b, &structured); err != nil {
				t.Fatal(err)
			}
			text := resultText(res)
			links := map[string]mcp.ResourceLink{}
			for _, ct := range res.Content {
				if l, ok := ct.(mcp.ResourceLink); ok {
					links[l.Name] = l
				}
			}
			for _, st := range []struct{ name, orig string }{{"stdout", c.stdout}, {"stderr", c.stderr}} {
				shown, _ := structured[st.name].(string)
				if !utf8.ValidString(shown) {
					t.Errorf("%s: structuredContent holds invalid UTF-8 (a rune was split): %q", st.name, abbrevTest(shown))
				}
				if st.orig != "" && !strings.Contains(text, st.name+":\n"+shown) {
					t.Errorf("%s: the text content does not show what structuredContent does:\ntext %q\nstructured %q", st.name, abbrevTest(text), abbrevTest(shown))
				}
				omitted, lines, uri, hasOmitted := omittedOf(t, structured, st.name)
				if len(st.orig) <= head+tail {
					if shown != st.orig || hasOmitted || links[st.name].URI != "" {
						t.Errorf("%s of %d bytes: shown %q (omitted field %v, link %q), want it whole", st.name, len(st.orig), abbrevTest(shown), hasOmitted, links[st.name].URI)
					}
					continue
				}
				sum, ok := splitSummary(shown)
				if !ok || !hasOmitted {
					t.Fatalf("%s of %d bytes is not summarised: %s_omitted present %v, shown %d bytes: %q", st.name, len(st.orig), st.name, hasOmitted, len(shown), abbrevTest(shown))
				}
				headLen := len(st.orig) - omitted - len(sum.tail)
				switch {
				case headLen <= 0 || headLen > head || len(sum.tail) == 0 || len(sum.tail) > tail:
					t.Errorf("%s: head %d bytes, tail %d bytes, want each from 1 to %d / %d", st.name, headLen, len(sum.tail), head, tail)
				case sum.head != st.orig[:headLen] && sum.head != st.orig[:headLen]+"\n":
					t.Errorf("%s: the head shown is not the output's first %d bytes (and a line break): %q", st.name, headLen, abbrevTest(sum.head))
				case (sum.head == st.orig[:headLen]) != strings.HasSuffix(st.orig[:headLen], "\n"):
					t.Errorf("%s: the omission line must start a line of its own, after the head's own line break or one added: head %q", st.name, abbrevTest(sum.head))
				case !strings.HasSuffix(st.orig, sum.tail):
					t.Errorf("%s: the tail shown is not the output's end: %q", st.name, abbrevTest(sum.tail))
				case lines != strings.Count(st.orig[headLen:len(st.orig)-len(sum.tail)], "\n"):
					t.Errorf("%s: %d lines left out reported, want the line breaks of the part left out (%d)", st.name, lines, strings.Count(st.orig[headLen:len(st.orig)-len(sum.tail)], "\n"))
				}
				if c.byLines && (!strings.HasSuffix(sum.head, "\n") || !strings.HasSuffix(st.orig[:len(st.orig)-len(sum.tail)], "\n")) {
					t.Errorf("%s: the cuts should fall between lines: head ends %q, tail starts %q", st.name, sum.head[max(0, len(sum.head)-12):], sum.tail[:min(12, len(sum.tail))])
				}
				for _, want := range []string{strconv.Itoa(omitted) + " bytes", "of " + st.name + " left out", uri, "resources/read"} {
					if !strings.Contains(sum.line, want) {
						t.Errorf("%s: the omission line %q does not say %q", st.name, sum.line, want)
					}
				}
				if !strings.HasPrefix(uri, artifacts.URIPrefix) {
					t.Fatalf("%s: uri %q, want one under %s", st.name, uri, artifacts.URIPrefix)
				}
				if l := links[st.name]; l.URI != uri || l.MIMEType != "text/plain" || l.Size == nil || *l.Size != int64(len(st.orig)) {
					t.Errorf("%s: resource_link %+v, want one to %s of %d bytes", st.name, l, uri, len(st.orig))
				}
				got, err := s.readArtifact(alice, readReq(uri))
				if tr, ok := firstText(got); err != nil || !ok || tr.Text != st.orig {
					t.Errorf("%s: resources/read %s: %v, %d contents, want the whole output (%d bytes)", st.name, uri, err, len(got), len(st.orig))
				}
				if _, err := s.readArtifact(bob, readReq(uri)); !errors.Is(err, artifacts.ErrNotFound) {
					t.Errorf("%s: another client read %s: %v, want not found", st.name, uri, err)
				}
			}
		})
	}
}

// firstText is the first of contents when it is text.
func firstText(contents []mcp.ResourceContents) (mcp.TextResourceContents, bool) {
	if len(contents) == 0 {
		return mcp.TextResourceContents{}, false
	}
	tr, ok := contents[0].(mcp.TextResourceContents)
	return tr, ok
}

// abbrevTest is s, or its first and last 100 bytes or so when it is longer.
func abbrevTest(s string) string {
	if len(s) <= 200 {
		return s
	}
	head, _, tail := cutOutput(s, 100, 100)
	return head + fmt.Sprintf("…(%d bytes)…", len(s)-len(head)-len(tail)) + tail
}

// A client older than resource_link content reads the URI in the text.
func TestOldClientsReadTheOutputsURIInTheText(t *testing.T) {
	long := sandboxtest.NumberedLines(5000)
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		return &sandbox.Result{Sandbox: sandbox.ModeProcess, Stdout: long}, nil
	})
	res, _ := s.handleExecute(contextWithProtocol("2025-03-26"), call(map[string]any{"language": "python", "code": "x"}))
	if len(res.Content) != 1 {
		t.Fatalf("%d contents, want the text alone: %+v", len(res.Content), res.Content)
	}
	if !strings.Contains(resultText(res), "of stdout left out; the whole stdout") || !strings.Contains(resultText(res), artifacts.URIPrefix) {
		t.Errorf("the text does not name the whole output's URI: %q", abbrevTest(resultText(res)))
	}
}

// When the whole output cannot be kept, the omission line says so and
// what to do instead.
func TestOutputNotKeptIsSaid(t *testing.T) {
	opts := testOptions()
	opts.Store = artifacts.NewStore(opts.Store.TTL(), 1<<10)
	long := sandboxtest.NumberedLines(5000)
	s := New(&sandboxtest.Fake{RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		return &sandbox.Result{Sandbox: sandbox.ModeProcess, Stdout: long}, nil
	}, Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}, opts)
	res, _ := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x"}))
	out := res.StructuredContent.(ExecuteOutput)
	sum, ok := splitSummary(out.Stdout)
	if !ok || out.StdoutOmitted == nil || out.StdoutOmitted.URI != "" || !strings.Contains(sum.line, "could not be kept") || !strings.Contains(sum.line, "CODE_EXEC_ARTIFACT_STORE_BYTES") {
		t.Errorf("omitted %+v, line %q", out.StdoutOmitted, sum.line)
	}
	if len(res.Content) != 1 {
		t.Errorf("%d contents, want the text alone (no link to nothing)", len(res.Content))
	}
}

// cutOutput cuts between lines where it can, and never inside a rune.
func TestCutOutput(t *testing.T) {
	cases := []struct {
		name, s, head, tail string
	}{
		{"shorter than the limit", "abc\n", "abc\n", ""},
		{"exactly at the limit", "0123456789abcdefghij", "0123456789abcdefghij", ""},
		{"one byte over: by runes", "0123456789abcdefghijk", "0123456789", "bcdefghijk"},
		{"between lines", "one\ntwo\nthree\nfour\nfive\nsix\n", "one\ntwo\n", "five\nsix\n"},
		{"a line break too early for the head, too late for the tail", "a\nbcdefghijklmnopqrstuvwxyz\nz", "a\nbcdefghi", "stuvwxyz\nz"},
		{"2-byte runes", strings.Repeat("é", 11), "ééééé", "ééééé"},
		{"2-byte runes, odd cut", "x" + strings.Repeat("é", 11), "xéééé", "ééééé"},
		{"3-byte runes", strings.Repeat("€", 8), "€€€", "€€€"},
		{"4-byte runes", strings.Repeat("🙂", 6), "🙂🙂", "🙂🙂"},
		{"4-byte runes between lines", strings.Repeat("🙂\n", 6), "🙂\n🙂\n", "🙂\n🙂\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			head, omitted, tail := cutOutput(c.s, 10, 10)
			if head != c.head || tail != c.tail || head+omitted+tail != c.s {
				t.Errorf("cutOutput(%q, 10, 10) = %q, %q, %q; want head %q and tail %q around the rest", c.s, head, omitted, tail, c.head, c.tail)
			}
			if !utf8.ValidString(head) || !utf8.ValidString(omitted) || !utf8.ValidString(tail) {
				t.Errorf("cutOutput(%q) split a rune: %q, %q, %q", c.s, head, omitted, tail)
			}
		})
	}
}
