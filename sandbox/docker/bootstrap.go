package docker

import (
	"fmt"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
)

// The bootstrap is the first program of a run container. It reads one header
// line, "<code length in bytes> <language>\n", from its stdin (dash's read
// builtin reads a pipe byte by byte, so it never takes more than the line),
// copies exactly that many bytes of code into /tmp with GNU head -c (which
// never reads past the count), and execs the interpreter on the file. The
// interpreter inherits the rest of the stream as the program's stdin.
//
// The table of interpreters is built at start from the in-image probe; the
// header only selects an entry, so nothing a request contains is ever
// interpreted by the shell.

// bootstrapCommand is the entrypoint of a run container.
func bootstrapCommand(script string) []string {
	return []string{"/bin/sh", "-c", script, "codeexec-bootstrap"}
}

// bootstrapHeader is the line that precedes the code on stdin.
func bootstrapHeader(lang string, codeLen int) string {
	return fmt.Sprintf("%d %s\n", codeLen, lang)
}

// bootstrapScript builds the bootstrap for the resolved interpreters.
func bootstrapScript(interps map[string]sandbox.Interpreter) string {
	var b strings.Builder
	b.WriteString(`IFS=' ' read -r n lang || { echo "codeexec: no program received" >&2; exit 125; }
case "$n" in ''|*[!0-9]*) echo "codeexec: bad program header" >&2; exit 125;; esac
case "$lang" in
`)
	for _, name := range sandbox.LanguageNames() {
		in, ok := interps[name]
		if !ok {
			continue
		}
		spec := sandbox.Languages[name]
		words := append([]string{in.Path}, spec.Args...)
		fmt.Fprintf(&b, "%s) f=/tmp/%s; set -- %s;;\n", name, spec.FileName, shellQuoteAll(words))
	}
	b.WriteString(`*) echo "codeexec: language $lang is not available" >&2; exit 125;;
esac
head -c "$n" > "$f" || exit 125
exec "$@" "$f"
`)
	return b.String()
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellQuoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shellQuote(w)
	}
	return strings.Join(q, " ")
}
