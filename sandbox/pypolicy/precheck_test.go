package pypolicy_test

import "testing"

// TestPrecheck: the quick check flags what the policy refuses, and leaves
// ordinary programs alone.
func TestPrecheck(t *testing.T) {
	p := policyFor(nil, 0)
	for _, c := range []struct {
		code string
		rule string
		line int
	}{
		{"import os", "import", 1},
		{"import math, subprocess as sp", "import", 1},
		{"x = 1\nfrom . import y", "import", 2},
		{"print(eval('1'))", "banned-name", 1},
		{"print(().__class__)", "dunder-attribute", 1},
		{"print('{0.__globals__}'.format(f))", "dunder-attribute", 1},
		{"g.gi_frame.f_back", "frame-internals", 1},
	} {
		got := p.Precheck(c.code)
		if len(got) == 0 || got[0].Rule != c.rule || got[0].Line != c.line {
			t.Errorf("Precheck(%q) = %+v, want rule %s at line %d first", c.code, got, c.rule, c.line)
		}
	}
	for _, c := range ordinaries {
		if got := p.Precheck(c.code); len(got) != 0 {
			t.Errorf("Precheck flags the ordinary program %s: %+v", c.name, got)
		}
	}
	escapesFlagged := 0
	for _, c := range escapes {
		if len(p.Precheck(c.code)) > 0 {
			escapesFlagged++
		}
	}
	// A triage aid: most escapes are flagged, not all (the real check
	// parses; this one reads lines).
	if escapesFlagged < len(escapes)/2 {
		t.Errorf("Precheck flags only %d of %d escape attempts", escapesFlagged, len(escapes))
	}
	t.Logf("Precheck flags %d of %d escape attempts", escapesFlagged, len(escapes))
}
