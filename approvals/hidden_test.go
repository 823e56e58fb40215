package approvals

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestAssessFlagsHiddenText: characters that make text read otherwise than
// it runs (Trojan Source) are flagged with their code point, in code of
// every language, whatever else the code does.
func TestAssessFlagsHiddenText(t *testing.T) {
	t.Parallel()
	family := []rune{
		// bidirectional controls
		0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069, 0x200E, 0x200F, 0x061C,
		// zero-width and invisible characters
		0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x00AD, 0xE0001, 0xE0041, 0xE007F, 0xFE00, 0xFE0F, 0xE0100, 0x3164, 0x115F, 0x180E,
		// C0 and C1 controls other than tab and newline, and line separators
		0x00, 0x01, 0x07, 0x08, 0x0B, 0x0C, 0x0D, 0x1B, 0x7F, 0x85, 0x9B, 0x2028, 0x2029,
		// spaces that are not U+0020
		0x00A0, 0x2007, 0x3000,
	}
	for _, lang := range []string{"python", "javascript", "bash"} {
		for _, r := range family {
			code := fmt.Sprintf("x = 1\ny = \"a%cb\"\n", r)
			got := Assess(lang, code)
			want := fmt.Sprintf("U+%04X", r)
			found := false
			for _, f := range got {
				if f.Category == Category("hidden-text") && strings.Contains(f.Reason, want) && f.Line == 2 {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: Assess(%q) does not flag %s on line 2: %q", lang, code, want, Reasons(got))
			}
		}
	}

	// The examples of the attack: an access check that reads otherwise
	// than it runs, and a long run of spaces that pushes code out of sight.
	for _, c := range []struct{ lang, code, reason string }{
		{"python", "access_level = \"user\"\nif access_level != \"none\u202E \u2066# Check if admin\u2069 \u2066\" and access_level != \"user\":\n    print(\"admin\")\n", "U+202E RIGHT-TO-LEFT OVERRIDE"},
		{"python", "print('report')" + strings.Repeat(" ", 200) + ";__import__('os')\n", "200 spaces"},
		{"javascript", "const isAdmin = false;\n/*\u202E } \u2066if (isAdmin)\u2069 \u2066 begin admins only */\n", "U+2066 LEFT-TO-RIGHT ISOLATE"},
		{"python", "# coding: raw_unicode_escape\n# a comment \\u000aprint('runs')\n", `"raw_unicode_escape"`},
		// A name that mixes scripts looks like another (Cyrillic "а").
		{"python", "p\u0430ypal = 1\n", "Latin and Cyrillic"},
	} {
		got := Assess(c.lang, c.code)
		if !strings.Contains(strings.Join(Reasons(got), "\n"), c.reason) {
			t.Errorf("Assess(%s, %q) does not say %q: %q", c.lang, c.code, c.reason, Reasons(got))
		}
	}

	// What is ordinary is not flagged: CRLF line ends, a byte order mark
	// at the start, emoji (with their variation selectors and joiners),
	// aligned comments, and words of one script.
	for _, code := range []string{
		"print(1)\r\nprint(2)\r\n",
		"\uFEFFprint(1)\n",
		"print('\u2714\uFE0F done, \u2764\uFE0F, \U0001F468\u200D\U0001F4BB')\n",
		"x = 1                                        # aligned comment\n",
		"print('Привет, мир', 'Grüße', 'αβγ')\n",
	} {
		if got := Assess("python", code); len(got) > 0 {
			t.Errorf("Assess(%q) flagged ordinary text: %q", code, Reasons(got))
		}
	}
}

func TestVisible(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want, line string }{
		{"print(1)\n\tx", "print(1)\n\tx", "print(1)⟨U+000A⟩⟨U+0009⟩x"},
		{"a\u202eb", "a⟨U+202E⟩b", "a⟨U+202E⟩b"},
		{"\x1b[2K\rok", "⟨U+001B⟩[2K⟨U+000D⟩ok", "⟨U+001B⟩[2K⟨U+000D⟩ok"},
		{"x\U000E0041\u200b\u00a0y", "x⟨U+E0041⟩⟨U+200B⟩⟨U+00A0⟩y", "x⟨U+E0041⟩⟨U+200B⟩⟨U+00A0⟩y"},
		{"Grüße, Привет, \u2714\uFE0F", "Grüße, Привет, \u2714⟨U+FE0F⟩", "Grüße, Привет, \u2714⟨U+FE0F⟩"},
		{"bad \xff byte", "bad ⟨0xFF⟩ byte", "bad ⟨0xFF⟩ byte"},
		{"\uFFFD stays", "\uFFFD stays", "\uFFFD stays"},
	} {
		if got := Visible(c.in); got != c.want {
			t.Errorf("Visible(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := VisibleLine(c.in); got != c.line {
			t.Errorf("VisibleLine(%q) = %q, want %q", c.in, got, c.line)
		}
	}
	// HiddenRanges lists exactly the characters Hidden reports.
	ranges := HiddenRanges()
	for i, rg := range ranges {
		if rg[0] > rg[1] || (i > 0 && ranges[i-1][1]+1 >= rg[0]) {
			t.Fatalf("HiddenRanges is not sorted, disjoint and coalesced at %d: %U", i, rg)
		}
	}
	in := func(r rune) bool {
		for _, rg := range ranges {
			if r >= rg[0] && r <= rg[1] {
				return true
			}
		}
		return false
	}
	for r := rune(0); r <= 0x10ffff; r++ {
		if in(r) != Hidden(r) {
			t.Fatalf("HiddenRanges and Hidden disagree on %U", r)
		}
	}
}

// TestEscapeHiddenJSON: JSON with hidden characters in its strings is
// written with \u escapes (also in the audit log), and decodes to the same.
func TestEscapeHiddenJSON(t *testing.T) {
	t.Parallel()
	in := map[string]string{"code": "a\u202eb\x1b[2J\u0085\U000E0041\u00a0 \u2714\uFE0F\tend\n", "plain": "print(1)"}
	b, _ := json.Marshal(in)
	out := EscapeHiddenJSON(b)
	for _, r := range string(out) {
		if Hidden(r) {
			t.Fatalf("EscapeHiddenJSON left %U in %s", r, out)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["code"] != in["code"] || back["plain"] != in["plain"] {
		t.Fatalf("EscapeHiddenJSON(%s) = %s, which decodes to %q (%v)", b, out, back, err)
	}
	if !strings.Contains(string(out), `\udb40\udc41`) {
		t.Errorf("a character beyond U+FFFF is not written as a surrogate pair: %s", out)
	}
}
