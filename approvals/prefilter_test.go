package approvals

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// allPatterns are every pattern of the risk check.
func allPatterns() []pattern {
	ps := []pattern{urlRE, pairRE, devTCPRE}
	for _, rl := range commonRules {
		ps = append(ps, rl.p)
	}
	for _, rs := range rules {
		for _, rl := range rs {
			ps = append(ps, rl.p)
		}
	}
	return ps
}

// TestPatternsHaveLiterals: every pattern has literals, so that the risk
// check tries it only on the lines that contain one, and every line a
// pattern matches (in TestAssess's cases) contains one of its literals.
func TestPatternsHaveLiterals(t *testing.T) {
	t.Parallel()
	var lines []string
	for _, c := range assessCases {
		lines = append(lines, strings.Split(c.code, "\n")...)
	}
	lines = append(lines, "exec 3<>/dev/tcp/10.0.0.1/80", "x = socket.create_connection(('example.com', 443))", "HTTPS://EXAMPLE.COM/", ". ./env.sh", "GH_TOKEN=1 mkfs.ext4 /dev/sda")
	for _, p := range allPatterns() {
		lits := p.lits()
		if len(lits) == 0 {
			t.Errorf("the pattern %s has no literals: every line of every file would be tried", p.re())
			continue
		}
		for _, l := range lines {
			if p.re().MatchString(l) && !slices.ContainsFunc(lits, func(lit string) bool { return strings.Contains(l, lit) }) {
				t.Errorf("%q matches %s but contains none of its literals %q", l, p.re(), lits)
			}
		}
	}
}

func TestRequiredLiterals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`abc`, []string{"abc"}},
		{`\bcurl\b`, []string{"curl"}},
		{`(?:^|\s)(nc|ncat|netcat)\b`, []string{"nc", "netcat"}}, // "ncat" contains "nc"
		{`mv|mkfs\w*`, []string{"mv", "mkfs"}},
		{`x*`, nil},
		{`a|b*`, nil},
		{`(?i)ab`, nil},
		{`(?i)://`, []string{"://"}},
		{`\d+\.\d+`, []string{"."}},
		{`[ab]c`, []string{"ac", "bc"}},
	} {
		re, err := syntax.Parse(c.expr, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		got := requiredLiterals(re.Simplify())
		slices.Sort(got)
		slices.Sort(c.want)
		if !slices.Equal(got, c.want) {
			t.Errorf("requiredLiterals(%s) = %q, want %q", c.expr, got, c.want)
		}
	}
}

// TestRiskCheckBudget: a large data file is read quickly (its lines hold
// no literal of the rules); text that keeps the rules busy past the budget
// is flagged as not read in full, never passed as harmless.
func TestRiskCheckBudget(t *testing.T) {
	t.Parallel()
	var csv strings.Builder
	for i := 0; csv.Len() < 4<<20; i++ {
		fmt.Fprintf(&csv, "%d,2024-01-%02d,customer %d,%d.%02d\n", i, i%28+1, i%977, i%1000, i%100)
	}
	if got := AssessInputs([]artifacts.Input{{Path: "big.csv", Data: []byte(csv.String())}}, ""); len(got) > 0 {
		t.Errorf("a CSV is flagged: %q", Reasons(got))
	}
	// Every line holds literals of several rules and matches none.
	// (A budget smaller than inputBudget keeps the test quick.)
	busy := strings.Repeat("os.environ_ > exec_ form & env_ set_ eval_ "+strings.Repeat("x", 200)+"\n", 2000)
	got := assessText(busy, &budget{left: 256 << 10}, "python", "javascript", "bash")
	if !slices.ContainsFunc(got, func(f Finding) bool { return f.Category == CategoryUnchecked }) {
		t.Errorf("text past the budget is not flagged as unchecked: %q", Reasons(got))
	}
	if !PolicyRisky.Requires(got) {
		t.Error("text past the budget does not make a risky run wait")
	}
}
