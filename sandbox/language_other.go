//go:build !windows

package sandbox

// interpreterCandidates are the commands that may run spec's programs,
// best first: its Interpreters.
func interpreterCandidates(spec LanguageSpec) [][]string {
	out := make([][]string, len(spec.Interpreters))
	for i, name := range spec.Interpreters {
		out[i] = []string{name}
	}
	return out
}

// acceptInterpreter accepts every interpreter found.
func acceptInterpreter(path string) error { return nil }
