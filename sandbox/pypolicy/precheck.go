package pypolicy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Finding is one thing Precheck expects the policy to refuse.
type Finding struct {
	Rule   string
	Line   int
	Detail string
}

var (
	precheckImport  = regexp.MustCompile(`^\s*(?:import\s+([\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*)|from\s+(\.*[\w.]*)\s+import\b)`)
	precheckBanned  = regexp.MustCompile(`(?:^|[^\w.])(open|eval|exec|compile|globals|locals|vars|breakpoint|__import__|__builtins__)\b`)
	precheckDunder  = regexp.MustCompile(`\.\s*(__\w+__)`)
	precheckFrame   = regexp.MustCompile(`\.\s*(gi_frame|gi_code|cr_frame|ag_frame|f_back|f_globals|f_locals|f_builtins|f_code|tb_frame|tb_next|co_code|mro)\b`)
	readableDunders = []string{"__name__", "__qualname__", "__doc__"}
)

// Precheck is a quick, approximate look at python code for what the policy
// would refuse: imports beyond the allowed ones, banned names, dunder and
// frame attributes. It is a triage aid for the approvals risk check, run on
// the server before anything starts; the authority is the check inside the
// sandbox, which parses the program (Precheck reads lines: it can miss what
// the real check refuses, and flag a word in a string).
func (p Policy) Precheck(code string) []Finding {
	var out []Finding
	seen := map[string]bool{}
	add := func(f Finding) {
		if !seen[f.Rule] {
			seen[f.Rule] = true
			out = append(out, f)
		}
	}
	for i, line := range strings.Split(code, "\n") {
		n := i + 1
		if j := strings.IndexByte(line, '#'); j >= 0 && !strings.ContainsAny(line[:j], `'"`) {
			line = line[:j]
		}
		if m := precheckImport.FindStringSubmatch(line); m != nil {
			mods := []string{m[2]}
			if m[1] != "" {
				mods = nil
				for _, part := range strings.Split(m[1], ",") {
					mods = append(mods, strings.Fields(part)[0])
				}
			}
			for _, mod := range mods {
				top, _, _ := strings.Cut(mod, ".")
				if top == "" || !slices.Contains(p.AllowedImports, top) {
					add(Finding{Rule: "import", Line: n, Detail: fmt.Sprintf("imports %q, which is not among the allowed imports", mod)})
				}
			}
		}
		if m := precheckBanned.FindStringSubmatch(line); m != nil {
			add(Finding{Rule: "banned-name", Line: n, Detail: fmt.Sprintf("uses %s", m[1])})
		}
		for _, m := range precheckDunder.FindAllStringSubmatch(line, -1) {
			if !slices.Contains(readableDunders, m[1]) {
				add(Finding{Rule: "dunder-attribute", Line: n, Detail: fmt.Sprintf("reads the attribute %s", m[1])})
				break
			}
		}
		if m := precheckFrame.FindStringSubmatch(line); m != nil {
			add(Finding{Rule: "frame-internals", Line: n, Detail: fmt.Sprintf("reads the attribute %s", m[1])})
		}
	}
	return out
}
