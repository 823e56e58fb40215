package configs

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// The names of codeexec's namespace that are not settings. Everything else
// in it (CODE_EXEC_*, and near misses such as CODEEXEC_* or code_exec_*)
// is a mistake that CheckNames reports: a misspelled setting must not leave
// the server running on a default the operator did not mean.

// ReservedPrefixes are the prefixes kept for codeexec's tests and CI
// (CODE_EXEC_REQUIRE_DOCKER=1, CODE_EXEC_TEST_SECRET, CODE_EXEC_CI_K8S_GVISOR
// ...): no setting starts with one, and CheckNames leaves them alone.
var ReservedPrefixes = []string{"CODE_EXEC_TEST_", "CODE_EXEC_REQUIRE_", "CODE_EXEC_CI_"}

// IgnoredNames are the other names of codeexec's namespace that are no
// settings: each is read by a test, a script or the benchmark, or set by
// codeexec in its runs' environment, where a server started from a run
// sees it. CheckNames leaves them alone; a test checks that each is used.
var IgnoredNames = []string{
	"CODE_EXEC_E2E_BINARY",               // e2e: a binary built elsewhere
	"CODE_EXEC_DATASCIENCE_IMAGE",        // docker tests and .ci: the datascience image
	"CODE_EXEC_UPDATE_SCREENSHOT",        // e2e: retake the console's screenshot
	"CODE_EXEC_DOCKER_TEST_CRASH_HELPER", // sandbox/docker tests: a crashing server
	"CODE_EXEC_RUN_ID",                   // mode none: marks a run's processes
	"CODEEXEC_BENCH_SERVER_LOGS",         // codeexec-bench: show the servers' logs
	"CODEEXEC_RUN_TOKEN",                 // a run's token (CODE_EXEC_RUN_TOKEN_KEY)
	"CODEEXEC_PACKAGES",                  // a run's packages folder (CODE_EXEC_PACKAGES)
	"CODEEXEC_FIGURE_DIR",                // a python run's figures folder
}

// nearPrefix matches the names that begin like Prefix: CODE_EXEC_, and near
// misses in any case with other separators or none (CODEEXEC_, code-exec-,
// CODE_EXECSANDBOX). Its first group is the separator after EXEC, its
// second what follows.
var nearPrefix = regexp.MustCompile(`^(?i)code[^a-z0-9]*exec([^a-z0-9]*)(.*)$`)

// CheckNames reports the variables of environ (KEY=value pairs) that look
// like settings but are none: every CODE_EXEC_* name that is not a setting,
// a reserved prefix or an ignored name, and the near misses of the prefix
// (CODEEXEC_SANDBOX, code_exec_sandbox, CODE_EXECSANDBOX ...). The error is
// one line that names each, with the closest settings where there are
// some; it never shows a value. A glued near miss (CODE_EXEC followed by
// letters) counts only when it is close to a setting, so that other
// programs' names such as CODE_EXECUTOR_HOME are not taken for codeexec's.
func CheckNames(environ []string) error {
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if known(name) {
			continue
		}
		m := nearPrefix.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		suggestions := suggest(m[2])
		if m[1] == "" && m[2] != "" && len(suggestions) == 0 {
			continue
		}
		errs = append(errs, unknownError(name, suggestions))
	}
	return joinOneLine(errs)
}

// known reports whether name is a setting, reserved or ignored.
func known(name string) bool {
	if slices.Contains(IgnoredNames, name) || slices.ContainsFunc(ReservedPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
		return true
	}
	_, ok := settingNames()[name]
	return ok
}

// settingNames is the set of every setting's variable.
func settingNames() map[string]bool {
	names := map[string]bool{}
	for _, s := range Settings() {
		names[s.Name] = true
	}
	return names
}

// unknownError is the error of one unknown name.
func unknownError(name string, suggestions []string) error {
	if len(suggestions) == 0 {
		return fmt.Errorf("%s is not a codeexec setting: remove it, or see codeexec --help for every setting", name)
	}
	alt := suggestions[0]
	if n := len(suggestions); n > 1 {
		alt = strings.Join(suggestions[:n-1], ", ") + " or " + suggestions[n-1]
	}
	return fmt.Errorf("%s is not a codeexec setting: did you mean %s? (codeexec --help lists every setting)", name, alt)
}

// maxSuggestions bounds the settings one unknown name suggests.
const maxSuggestions = 3

// suggest returns the settings closest to rest, the part of a name after
// its prefix: the same name in upper case; else those within a few edits
// (CODE_EXEC_TIMOUT: CODE_EXEC_TIMEOUT); else those whose words hold all of
// rest's or whose words rest holds, fewest words apart first
// (CODE_EXEC_SANDBOX_MODE: CODE_EXEC_SANDBOX; CODE_EXEC_IMAGE:
// CODE_EXEC_DOCKER_IMAGE or CODE_EXEC_K8S_IMAGE). At most maxSuggestions,
// in the order of --help.
func suggest(rest string) []string {
	r := strings.Join(nameWords(rest), "_")
	if r == "" {
		return nil
	}
	var all []string
	for _, s := range Settings() {
		all = append(all, strings.TrimPrefix(s.Name, Prefix))
	}
	if slices.Contains(all, r) {
		return []string{Prefix + r}
	}
	limit := 1
	switch {
	case len(r) > 10:
		limit = 3
	case len(r) > 4:
		limit = 2
	}
	if out := closest(all, limit, func(s string) int { return editDistance(r, s) }); len(out) > 0 {
		return out
	}
	words := nameWords(r)
	return closest(all, 64, func(s string) int {
		sw := nameWords(s)
		if !coversWords(words, sw) && !coversWords(sw, words) {
			return 1 << 30
		}
		return abs(len(words) - len(sw))
	})
}

// closest returns, with Prefix, the names whose distance is the least and
// at most limit.
func closest(names []string, limit int, distance func(string) int) []string {
	best := limit + 1
	var out []string
	for _, n := range names {
		switch d := distance(n); {
		case d < best:
			best, out = d, []string{Prefix + n}
		case d == best && len(out) < maxSuggestions:
			out = append(out, Prefix+n)
		}
	}
	return out
}

// nameWords splits a name into its upper-case words at every character
// that is not a letter or digit.
func nameWords(s string) []string {
	return strings.FieldsFunc(strings.ToUpper(s), func(r rune) bool {
		return (r < 'A' || r > 'Z') && (r < '0' || r > '9')
	})
}

// coversWords reports whether every word of b matches a word of a: the
// same word, one edit apart (4 letters or more), or one the start of the
// other (3 letters or more: MEM, MEMORY).
func coversWords(a, b []string) bool {
	for _, w := range b {
		if !slices.ContainsFunc(a, func(v string) bool {
			short, long := min(len(w), len(v)), max(len(w), len(v))
			return w == v || (short >= 4 && editDistance(w, v) <= 1) ||
				(short >= 3 && long > short && (strings.HasPrefix(v, w) || strings.HasPrefix(w, v)))
		}) {
			return false
		}
	}
	return true
}

// editDistance is the Levenshtein distance of two ASCII strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
