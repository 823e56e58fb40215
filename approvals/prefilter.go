package approvals

import (
	"iter"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// The risk check reads every file of a request, up to the operator's caps
// (megabytes), with the rules of every language. Go's regular expressions
// take about a second per megabyte and rule-set, so a pattern is only tried
// on the lines that contain one of the literals that each of its matches
// contains (most lines of data contain none), and a request's inputs get a
// budget of work: past it, the rest is flagged as not read.

// pattern is a regular expression of the risk check, compiled on first
// use (not when the program starts: every run re-executes the codeexec
// binary for its helpers, which must not pay for the rules).
type pattern struct {
	re func() *regexp.Regexp
	// lits are the literals one of which every match contains; nil when
	// there are none (then every line is tried).
	lits func() []string
}

func newPattern(expr string) pattern {
	return pattern{
		re: lazyRegexp(expr),
		lits: sync.OnceValue(func() []string {
			re, err := syntax.Parse(expr, syntax.Perl)
			if err != nil {
				return nil
			}
			return requiredLiterals(re.Simplify())
		}),
	}
}

// lazyRegexp compiles pattern on first use. TestRulesCompile compiles
// every one.
func lazyRegexp(pattern string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(pattern) })
}

// maxExact caps how many strings exact lists.
const maxExact = 64

// exact returns every string re matches, when re matches only a few
// strings (at most maxExact); ok is false otherwise.
func exact(re *syntax.Regexp) (out []string, ok bool) {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		// They match the empty string only (where they match at all).
		return []string{""}, true
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && unicode.SimpleFold(r) != r {
				return nil, false // a letter, in either case
			}
		}
		return []string{string(re.Rune)}, true
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for r := re.Rune[i]; r <= re.Rune[i+1]; r++ {
				if out = append(out, string(r)); len(out) > 8 {
					return nil, false
				}
			}
		}
		return out, true
	case syntax.OpCapture:
		return exact(re.Sub[0])
	case syntax.OpQuest:
		sub, ok := exact(re.Sub[0])
		return append(sub, ""), ok && len(sub) < maxExact
	case syntax.OpAlternate:
		return union(re.Sub, maxExact, exact)
	case syntax.OpConcat:
		out = []string{""}
		for _, sub := range re.Sub {
			e, ok := exact(sub)
			if out = product(out, e); !ok || out == nil {
				return nil, false
			}
		}
		return out, true
	}
	return nil, false
}

// inner is the part of re whose match is (or starts) every match of re:
// the group of a capture, the repeated part of x+ or x{n,} with n ≥ 1;
// nil for other expressions.
func inner(re *syntax.Regexp) *syntax.Regexp {
	switch {
	case re.Op == syntax.OpCapture, re.Op == syntax.OpPlus, re.Op == syntax.OpRepeat && re.Min >= 1:
		return re.Sub[0]
	}
	return nil
}

// union is the strings of f for every one of subs (the alternatives of an
// alternation), or false when f cannot tell for one of them or there are
// more than most.
func union(subs []*syntax.Regexp, most int, f func(*syntax.Regexp) ([]string, bool)) ([]string, bool) {
	var out []string
	for _, sub := range subs {
		l, ok := f(sub)
		if out = append(out, l...); !ok || len(out) > most {
			return nil, false
		}
	}
	return out, true
}

// product is every string of a followed by one of b, or nil when there
// would be more than maxExact.
func product(a, b []string) []string {
	if len(a)*len(b) > maxExact {
		return nil
	}
	var out []string
	for _, x := range a {
		for _, y := range b {
			out = append(out, x+y)
		}
	}
	return out
}

// prefixes returns strings one of which every match of re starts with,
// or false when it cannot tell.
func prefixes(re *syntax.Regexp) ([]string, bool) {
	if e, ok := exact(re); ok {
		return e, true
	}
	if sub := inner(re); sub != nil {
		return prefixes(sub)
	}
	switch re.Op {
	case syntax.OpAlternate:
		return union(re.Sub, maxExact, prefixes)
	case syntax.OpConcat:
		run := []string{""}
		for _, sub := range re.Sub {
			e, ok := exact(sub)
			if !ok {
				if e, ok = prefixes(sub); ok {
					if p := product(run, e); p != nil {
						run = p
					}
				}
				break
			}
			p := product(run, e)
			if p == nil {
				break
			}
			run = p
		}
		return run, true
	}
	return nil, false
}

// requiredLiterals returns literals one of which every match of re
// contains, or nil when it cannot tell.
func requiredLiterals(re *syntax.Regexp) []string {
	return minimal(required(re))
}

// minimal is lits without those that contain another: a text that
// contains one of lits contains one of minimal(lits).
func minimal(lits []string) []string {
	var out []string
	for i, l := range lits {
		if !slices.ContainsFunc(lits, func(o string) bool { return o != l && strings.Contains(l, o) }) && !slices.Contains(lits[:i], l) {
			out = append(out, l)
		}
	}
	return out
}

// required is requiredLiterals, not minimal.
func required(re *syntax.Regexp) []string {
	if e, ok := exact(re); ok {
		if slices.Contains(e, "") {
			return nil
		}
		return e
	}
	if sub := inner(re); sub != nil {
		return required(sub)
	}
	switch re.Op {
	case syntax.OpAlternate:
		out, _ := union(re.Sub, math.MaxInt, func(sub *syntax.Regexp) ([]string, bool) {
			l := required(sub)
			return l, l != nil
		})
		return out
	case syntax.OpConcat:
		// Every part must match: the strings of a run of parts that match
		// few strings, or the literals of one other part, whichever are
		// the longest (the rarest).
		var best []string
		better := func(l []string) {
			if len(l) == 0 || slices.Contains(l, "") {
				return
			}
			if best == nil || shortest(l) > shortest(best) {
				best = l
			}
		}
		run := []string{""}
		for _, sub := range re.Sub {
			if e, ok := exact(sub); ok {
				if p := product(run, e); p != nil {
					run = p
					continue
				}
				better(run)
				run = e
				continue
			}
			if e, ok := prefixes(sub); ok {
				if p := product(run, e); p != nil {
					better(p)
				}
			}
			better(run)
			run = []string{""}
			better(required(sub))
		}
		better(run)
		return best
	}
	return nil
}

// shortest is the length of the shortest of l.
func shortest(l []string) int {
	n := len(l[0])
	for _, s := range l {
		n = min(n, len(s))
	}
	return n
}

// text is a text split into lines, for the patterns of the risk check.
type text struct {
	s      string
	lines  []string
	starts []int // the offset of each line in s
}

func splitText(s string) *text {
	t := &text{s: s, lines: strings.Split(s, "\n")}
	t.starts = make([]int, len(t.lines))
	off := 0
	for i, l := range t.lines {
		t.starts[i] = off
		off += len(l) + 1
	}
	return t
}

// candidates yields, in order, the indexes of the lines where one of
// patterns may match: the lines that contain one of their literals (every
// line when a pattern has none).
func (t *text) candidates(patterns ...pattern) iter.Seq[int] {
	var lines []int
	for _, p := range patterns {
		lits := p.lits()
		if lits == nil {
			return func(yield func(int) bool) {
				for i := range t.lines {
					if !yield(i) {
						return
					}
				}
			}
		}
		for _, lit := range lits {
			for at := 0; at < len(t.s); {
				j := strings.Index(t.s[at:], lit)
				if j < 0 {
					break
				}
				line := sort.SearchInts(t.starts, at+j+1) - 1
				lines = append(lines, line)
				if line+1 >= len(t.starts) {
					break
				}
				at = t.starts[line+1]
			}
		}
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	return slices.Values(lines)
}

// budget is how many bytes of lines the risk check may still try patterns
// on for one request.
type budget struct {
	left int
	// refused counts the tries refused: each left something unread.
	refused int
}

// inputBudget is the budget of a request's files and stdin together, and
// of its code apart: about two seconds of work. Past it, the risk check
// stops and says so.
const inputBudget = 32 << 20

// spend takes the bytes of one try on line from b, and reports false when
// not enough are left.
func (b *budget) spend(line string) bool {
	if b.left < len(line)+1 {
		b.left = 0
		b.refused++
		return false
	}
	b.left -= len(line) + 1
	return true
}
