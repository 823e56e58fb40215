package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// interpreterCandidates are the commands that may run spec's programs on
// Windows, best first: python, then the py launcher's python 3 (py -3,
// which names its real python.exe); node; and for bash, Git for Windows'
// bash where Git's installer puts it, then a bash on PATH.
func interpreterCandidates(spec LanguageSpec) [][]string {
	switch spec.Name {
	case "python":
		return [][]string{{"python"}, {"py", "-3"}}
	case "javascript":
		return [][]string{{"node"}}
	case "bash":
		var out [][]string
		for _, base := range []string{os.Getenv("ProgramFiles"), os.Getenv("ProgramW6432"), filepath.Join(os.Getenv("LOCALAPPDATA"), "Programs")} {
			if filepath.IsAbs(base) {
				if p := filepath.Join(base, "Git", "bin", "bash.exe"); !slices.ContainsFunc(out, func(c []string) bool { return c[0] == p }) {
					out = append(out, []string{p})
				}
			}
		}
		return append(out, []string{"bash"})
	}
	out := make([][]string, len(spec.Interpreters))
	for i, name := range spec.Interpreters {
		out[i] = []string{name}
	}
	return out
}

// acceptInterpreter refuses the bash.exe in Windows' own folder: it is
// WSL's launcher, whose programs run in WSL's virtual machine, out of
// reach of the job object that holds a run.
func acceptInterpreter(path string) error {
	sys := os.Getenv("SystemRoot")
	if sys == "" {
		sys = `C:\Windows`
	}
	if strings.EqualFold(filepath.Base(path), "bash.exe") && strings.HasPrefix(strings.ToLower(path), strings.ToLower(sys)+`\`) {
		return fmt.Errorf("%s is WSL's launcher, whose programs would run outside the run's job object", path)
	}
	return nil
}
