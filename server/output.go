package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// A stdout or stderr of at most outputHead+outputTail bytes is shown whole;
// a longer one is shown as its first outputHead and last outputTail bytes
// (fewer, so that the cuts fall between lines, or at least between runes),
// with a line between them that says what was left out and where the whole
// output is. docs/tools.md states these sizes.
const (
	outputHead = 4 << 10
	outputTail = 4 << 10
)

// OutputOmission says what a summarised stdout or stderr left out, in
// code_execute's structuredContent.
type OutputOmission struct {
	Bytes int `json:"bytes" jsonschema:"Bytes left out between the head and the tail shown."`
	Lines int `json:"lines" jsonschema:"Line breaks in the part left out."`
	// URI is where resources/read serves the whole stream; empty when it
	// could not be kept.
	URI string `json:"uri,omitempty" jsonschema:"codeexec://runs/<run id>/stdout (or stderr): resources/read serves the whole output there for a while (CODE_EXEC_ARTIFACT_TTL); absent when it could not be kept."`
}

// cutOutput splits s into the head and the tail to show and the part
// between them to leave out: omitted is "" (and s is all in head) when s is
// at most head+tail bytes. The head ends after its last line break when that
// keeps at least half of head bytes, and the tail starts at the start of a
// line (after its first line break) under the same condition; otherwise a
// cut falls between two runes, never inside one. Head and tail are at most
// head and tail bytes long, and never empty.
func cutOutput(s string, head, tail int) (shownHead, omitted, shownTail string) {
	if len(s) <= head+tail {
		return s, "", ""
	}
	h := head
	if i := strings.LastIndexByte(s[:h], '\n'); i >= head/2 {
		h = i + 1
	} else {
		for h > 1 && !utf8.RuneStart(s[h]) {
			h--
		}
	}
	t := len(s) - tail
	switch i := strings.IndexByte(s[t:], '\n'); {
	case s[t-1] == '\n':
		// The tail starts a line already.
	case i >= 0 && i < tail/2:
		t += i + 1
	default:
		for t < len(s)-1 && !utf8.RuneStart(s[t]) {
			t++
		}
	}
	return s[:h], s[h:t], s[t:]
}

// summariseOutput keeps the whole of each stream of out that is too long to
// show (stdout, stderr) in the store, for the client session that asked,
// under a run id of its own (a run's files may have any name, so they
// cannot share one), and puts its head and tail in out in its place, with
// the omission line between them and <stream>_omitted set. It returns the
// contents that link to what it kept (none for clients older than
// resource_link content: the omission line names the URI).
func (s *Server) summariseOutput(ctx context.Context, out *ExecuteOutput) []mcp.Content {
	streams := []struct {
		name    string
		text    *string
		omitted **OutputOmission
	}{
		{"stdout", &out.Stdout, &out.StdoutOmitted},
		{"stderr", &out.Stderr, &out.StderrOmitted},
	}
	runID := s.opts.Replicas.Prefix() + artifacts.NewRunID()
	var links []mcp.Content
	for _, st := range streams {
		whole := *st.text
		head, omitted, tail := cutOutput(whole, outputHead, outputTail)
		if omitted == "" {
			continue
		}
		om := &OutputOmission{Bytes: len(omitted), Lines: strings.Count(omitted, "\n")}
		if s.opts.Store != nil {
			sum := sha256.Sum256([]byte(whole))
			a := []artifacts.Artifact{{Path: st.name, Size: int64(len(whole)), MIMEType: "text/plain", SHA256: hex.EncodeToString(sum[:]), Kind: artifacts.KindLink, Data: []byte(whole)}}
			if s.opts.Store.Put(runID, s.owner(ctx), a) == 1 {
				om.URI = a[0].URI
			}
		}
		if !strings.HasSuffix(head, "\n") {
			head += "\n"
		}
		*st.text = head + omissionLine(st.name, om, len(whole), s.ttl()) + tail
		*st.omitted = om
		if om.URI != "" && resourceLinks(ctx) {
			l := mcp.NewResourceLink(om.URI, st.name, fmt.Sprintf("The whole %s of the run (%s); the result shows its head and its tail. resources/read serves it for %s.", st.name, artifacts.FormatBytes(int64(len(whole))), s.ttl()), "text/plain")
			size := int64(len(whole))
			l.Size = &size
			links = append(links, l)
		}
	}
	return links
}

// omissionLine is the line between the head and the tail of a summarised
// stream: what was left out, and how to read the whole.
func omissionLine(stream string, om *OutputOmission, whole int, ttl string) string {
	what := fmt.Sprintf("%d bytes", om.Bytes)
	switch om.Lines {
	case 0:
	case 1:
		what += " (1 line)"
	default:
		what += fmt.Sprintf(" (%d lines)", om.Lines)
	}
	where := fmt.Sprintf("the whole %s (%s) is at %s: read it with resources/read within %s", stream, artifacts.FormatBytes(int64(whole)), om.URI, ttl)
	if om.URI == "" {
		where = fmt.Sprintf("the whole %s (%s) could not be kept for resources/read (it is larger than CODE_EXEC_ARTIFACT_STORE_BYTES): print less, for example a summary", stream, artifacts.FormatBytes(int64(whole)))
	}
	return fmt.Sprintf("[… %s of %s left out; %s …]\n", what, stream, where)
}
