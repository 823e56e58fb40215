package approvals

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// What a person approving a run reads must be what runs. Some characters
// do not show as themselves: bidirectional controls reorder the text
// around them (Trojan Source, CVE-2021-42574), zero-width and other
// invisible characters show as nothing, control characters act on a
// terminal, and spaces other than U+0020 look like spaces but are not.
// Visible escapes them wherever codeexec shows a request (the console, the
// CLI, the elicitation message), and the risk check flags them.

// invisible are the characters that show as nothing, or as a space, but
// are none of Unicode's control, format or separator characters.
var invisible = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x034f, Hi: 0x034f, Stride: 1}, // COMBINING GRAPHEME JOINER
		{Lo: 0x115f, Hi: 0x1160, Stride: 1}, // HANGUL CHOSEONG and JUNGSEONG FILLER
		{Lo: 0x17b4, Hi: 0x17b5, Stride: 1}, // KHMER VOWEL INHERENT AQ and AA
		{Lo: 0x180b, Hi: 0x180f, Stride: 1}, // MONGOLIAN FREE VARIATION SELECTORS, VOWEL SEPARATOR
		{Lo: 0x2800, Hi: 0x2800, Stride: 1}, // BRAILLE PATTERN BLANK
		{Lo: 0x3164, Hi: 0x3164, Stride: 1}, // HANGUL FILLER
		{Lo: 0xfe00, Hi: 0xfe0f, Stride: 1}, // VARIATION SELECTOR-1 to -16
		{Lo: 0xffa0, Hi: 0xffa0, Stride: 1}, // HALFWIDTH HANGUL FILLER
	},
	R32: []unicode.Range32{
		{Lo: 0xe0000, Hi: 0xe007f, Stride: 1}, // tags
		{Lo: 0xe0100, Hi: 0xe01ef, Stride: 1}, // VARIATION SELECTOR-17 to -256
	},
}

// Hidden reports whether r does not show as itself to a person reading
// text: a control character other than tab and newline (C0, DEL, C1), a
// format character (Unicode category Cf: bidirectional controls,
// zero-width characters, the soft hyphen, tags, ...), a line or paragraph
// separator, a space other than U+0020, or another invisible character
// (variation selectors, Hangul fillers, ...).
func Hidden(r rune) bool {
	switch {
	case r == '\t' || r == '\n':
		return false
	case r < 0x80:
		return r < 0x20 || r == 0x7f
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Zs, invisible)
}

// HiddenRanges returns the characters for which Hidden holds, as sorted,
// disjoint, inclusive ranges (for the console's script, which escapes
// exactly the same characters).
var HiddenRanges = sync.OnceValue(func() [][2]rune {
	var runes []rune
	for _, t := range []*unicode.RangeTable{unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Zs, invisible} {
		for _, rg := range t.R16 {
			for r := rune(rg.Lo); r <= rune(rg.Hi); r += rune(rg.Stride) {
				runes = append(runes, r)
			}
		}
		for _, rg := range t.R32 {
			for r := rune(rg.Lo); r <= rune(rg.Hi); r += rune(rg.Stride) {
				runes = append(runes, r)
			}
		}
	}
	slices.Sort(runes)
	var out [][2]rune
	for _, r := range slices.Compact(runes) {
		if !Hidden(r) {
			continue
		}
		if n := len(out); n > 0 && out[n-1][1] == r-1 {
			out[n-1][1] = r
		} else {
			out = append(out, [2]rune{r, r})
		}
	}
	return out
})

// Escape is how Visible shows a character that does not show as itself.
func Escape(r rune) string { return fmt.Sprintf("⟨U+%04X⟩", r) }

// Visible returns s as a person should read it: every character for which
// Hidden holds is replaced by its code point, as ⟨U+202E⟩; tabs and
// newlines stay. A byte that is not UTF-8 shows as ⟨0xFF⟩.
func Visible(s string) string { return visible(s, false) }

// VisibleLine is Visible for text that must stay on one line (a name, a
// reason): tabs and newlines are escaped too.
func VisibleLine(s string) string { return visible(s, true) }

func visible(s string, oneLine bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, "⟨0x%02X⟩", s[i])
		case Hidden(r) || (oneLine && (r == '\t' || r == '\n')):
			b.WriteString(Escape(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// EscapeHiddenJSON returns the JSON document b with every hidden character
// (which JSON holds only inside strings: encoding/json escapes the C0
// controls, not the others) written as a \u escape: the same document,
// which a terminal or an editor shows as it is.
func EscapeHiddenJSON(b []byte) []byte {
	if isASCII(string(b)) && !bytes.ContainsRune(b, 0x7f) {
		return b
	}
	var out bytes.Buffer
	for _, r := range string(b) {
		if !Hidden(r) {
			out.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&out, `\u%04x`, u)
		}
	}
	return out.Bytes()
}

// hiddenNames name the hidden characters an approver most needs told apart.
var hiddenNames = map[rune]string{
	0x00: "NULL", 0x07: "BELL", 0x08: "BACKSPACE", 0x0b: "LINE TABULATION", 0x0c: "FORM FEED",
	0x0d: "CARRIAGE RETURN", 0x1b: "ESCAPE", 0x7f: "DELETE", 0x85: "NEXT LINE", 0x9b: "CONTROL SEQUENCE INTRODUCER",
	0xa0: "NO-BREAK SPACE", 0xad: "SOFT HYPHEN", 0x34f: "COMBINING GRAPHEME JOINER", 0x61c: "ARABIC LETTER MARK",
	0x115f: "HANGUL CHOSEONG FILLER", 0x1160: "HANGUL JUNGSEONG FILLER", 0x180e: "MONGOLIAN VOWEL SEPARATOR",
	0x200b: "ZERO WIDTH SPACE", 0x200c: "ZERO WIDTH NON-JOINER", 0x200d: "ZERO WIDTH JOINER",
	0x200e: "LEFT-TO-RIGHT MARK", 0x200f: "RIGHT-TO-LEFT MARK", 0x2028: "LINE SEPARATOR", 0x2029: "PARAGRAPH SEPARATOR",
	0x202a: "LEFT-TO-RIGHT EMBEDDING", 0x202b: "RIGHT-TO-LEFT EMBEDDING", 0x202c: "POP DIRECTIONAL FORMATTING",
	0x202d: "LEFT-TO-RIGHT OVERRIDE", 0x202e: "RIGHT-TO-LEFT OVERRIDE", 0x202f: "NARROW NO-BREAK SPACE",
	0x2060: "WORD JOINER", 0x2066: "LEFT-TO-RIGHT ISOLATE", 0x2067: "RIGHT-TO-LEFT ISOLATE",
	0x2068: "FIRST STRONG ISOLATE", 0x2069: "POP DIRECTIONAL ISOLATE", 0x2800: "BRAILLE PATTERN BLANK",
	0x3000: "IDEOGRAPHIC SPACE", 0x3164: "HANGUL FILLER", 0xfeff: "ZERO WIDTH NO-BREAK SPACE (byte order mark)",
	0xffa0: "HALFWIDTH HANGUL FILLER",
}

// describeHidden names a hidden character for the risk check's reasons,
// such as "U+202E RIGHT-TO-LEFT OVERRIDE".
func describeHidden(r rune) string {
	u := fmt.Sprintf("U+%04X", r)
	if n, ok := hiddenNames[r]; ok {
		return u + " " + n
	}
	switch {
	case r >= 0xe0020 && r <= 0xe007e:
		return fmt.Sprintf("%s, an invisible tag character (a hidden %q)", u, r-0xe0000)
	case r >= 0xe0000 && r <= 0xe007f:
		return u + ", an invisible tag character"
	case (r >= 0xfe00 && r <= 0xfe0f) || (r >= 0xe0100 && r <= 0xe01ef):
		return u + ", a variation selector"
	case unicode.Is(unicode.Cc, r):
		return u + ", a control character"
	case unicode.Is(unicode.Zs, r):
		return u + ", a space other than U+0020"
	case unicode.Is(unicode.Cf, r):
		return u + ", an invisible formatting character"
	}
	return u + ", an invisible character"
}

// maxHiddenFindings caps how many distinct hidden characters one text's
// findings name; one more finding counts the rest.
const maxHiddenFindings = 8

// wideGap is the width (a tab counts 8) of a run of white space in the
// middle of a line from which the risk check flags it: enough to push what
// follows past the edge of a window.
const wideGap = 80

// hiddenFindings flags what in text does not show as itself: each distinct
// hidden character (with the line of its first use), wide gaps of white
// space in the middle of a line, and names that mix look-alike scripts.
// What is ordinary is left alone: a byte order mark at the start, CR
// before LF, and the variation selectors and joiners inside emoji.
func hiddenFindings(text string) []Finding {
	var out []Finding
	seen := map[rune]bool{}
	more, moreLine := 0, 0
	line := 1
	var prev rune
	for i, r := range text {
		if r == '\n' {
			line++
		}
		if Hidden(r) && !ordinaryHidden(text, i, r, prev) && !seen[r] {
			seen[r] = true
			if len(seen) <= maxHiddenFindings {
				out = append(out, hiddenFinding(line, describeHidden(r)))
			} else if more++; more == 1 {
				moreLine = line
			}
		}
		prev = r
	}
	if more > 0 {
		out = append(out, Finding{Category: CategoryHidden, Line: moreLine, Reason: fmt.Sprintf("%s: %d more kinds of hidden characters (the first on line %d)", categoryLabel[CategoryHidden], more, moreLine)})
	}
	for i, l := range strings.Split(text, "\n") {
		if gap := widestGap(l); gap != "" {
			out = append(out, hiddenFinding(i+1, gap+" in the middle of the line push what follows out of sight"))
		}
		for _, name := range mixedScriptNames(l, 3) {
			out = append(out, hiddenFinding(i+1, name))
		}
	}
	return out
}

func hiddenFinding(line int, what string) Finding {
	return Finding{Category: CategoryHidden, Line: line, Reason: fmt.Sprintf("%s: %s (line %d)", categoryLabel[CategoryHidden], what, line)}
}

// ordinaryHidden reports whether the hidden r at byte i of text, after
// prev, is ordinary: a byte order mark that starts the text, CR before LF,
// a variation selector after a symbol (emoji presentation), or a joiner
// between the parts of an emoji.
func ordinaryHidden(text string, i int, r, prev rune) bool {
	next, _ := utf8.DecodeRuneInString(text[i+utf8.RuneLen(r):])
	symbol := func(c rune) bool { return unicode.In(c, unicode.So, unicode.Sk) }
	switch r {
	case 0xfeff:
		return i == 0
	case '\r':
		return next == '\n'
	case 0xfe0e, 0xfe0f:
		return symbol(prev) || (prev >= '0' && prev <= '9') || prev == '#' || prev == '*'
	case 0x200d:
		return (symbol(prev) || prev == 0xfe0f) && symbol(next)
	}
	return false
}

// widestGap describes the widest run of spaces and tabs between two other
// characters of line, if it is at least wideGap wide ("" if none is).
func widestGap(line string) string {
	best, spaces, tabs := 0, 0, 0
	bestSpaces, bestTabs := 0, 0
	started := false
	for _, r := range line {
		switch {
		case r == ' ' || r == '\t':
			if started {
				if r == ' ' {
					spaces++
				} else {
					tabs++
				}
			}
		default:
			if w := spaces + 8*tabs; started && w > best {
				best, bestSpaces, bestTabs = w, spaces, tabs
			}
			started, spaces, tabs = true, 0, 0
		}
	}
	switch {
	case best < wideGap:
		return ""
	case bestTabs == 0:
		return fmt.Sprintf("%d spaces in a row", bestSpaces)
	case bestSpaces == 0:
		return fmt.Sprintf("%d tabs in a row", bestTabs)
	}
	return fmt.Sprintf("%d spaces and tabs in a row", bestSpaces+bestTabs)
}

// nameRE matches the names (identifiers, words) of a line.
var nameRE = lazyRegexp(`[\p{L}\p{M}\p{Nd}_$]+`)

// lookAlikeScripts are the scripts whose letters are easily mistaken for
// one another's (a Latin "a" and a Cyrillic "а").
var lookAlikeScripts = []struct {
	name  string
	table *unicode.RangeTable
}{
	{"Latin", unicode.Latin}, {"Greek", unicode.Greek}, {"Cyrillic", unicode.Cyrillic},
	{"Armenian", unicode.Armenian}, {"Cherokee", unicode.Cherokee},
}

// mixedScriptNames describes up to n names of line whose letters come from
// more than one of lookAlikeScripts: a name that looks like another.
func mixedScriptNames(line string, n int) []string {
	if isASCII(line) {
		return nil
	}
	var out []string
	for _, name := range nameRE().FindAllString(line, -1) {
		var scripts []string
		for _, r := range name {
			for _, s := range lookAlikeScripts {
				if unicode.Is(s.table, r) && !slices.Contains(scripts, s.name) {
					scripts = append(scripts, s.name)
				}
			}
		}
		if len(scripts) > 1 {
			out = append(out, fmt.Sprintf("the name %s mixes %s letters, which look alike", strconv.QuoteToASCII(name), strings.Join(scripts, " and ")))
			if len(out) == n {
				break
			}
		}
	}
	return out
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// codingRE matches python's source encoding declaration (PEP 263), which
// python reads on the first two lines.
var codingRE = lazyRegexp(`^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)`)

// encodingFindings flags a python source encoding declaration other than
// UTF-8 or ASCII: python then decodes the file otherwise than it is shown
// (with utf-7 or raw_unicode_escape, "+AAo-" or "\u000a" inside a comment
// is a new line of code).
func encodingFindings(lines []string) []Finding {
	for i, l := range lines[:min(2, len(lines))] {
		m := codingRE().FindStringSubmatch(l)
		if m == nil {
			continue
		}
		switch strings.ReplaceAll(strings.ToLower(m[1]), "_", "-") {
		case "utf-8", "utf8", "u8", "utf", "ascii", "us-ascii", "646":
			return nil
		}
		return []Finding{hiddenFinding(i+1, fmt.Sprintf("declares the source encoding %q, so python reads the text otherwise than it is shown", m[1]))}
	}
	return nil
}
