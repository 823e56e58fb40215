package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// LanguageSpec describes how a language is run. Runners use it to find an
// interpreter and to name the program file.
type LanguageSpec struct {
	// Name is the canonical name used in requests and results.
	Name string
	// Aliases are other names a request may use.
	Aliases []string
	// FileName is the name of the program file inside the work directory.
	FileName string
	// Interpreters are the binaries to look for, best first. The first one
	// found is used; a runner resolves it once, at start.
	Interpreters []string
	// Args are placed between the interpreter and the program file.
	Args []string
	// ProbeArgs make the interpreter print two lines: the real path of its
	// own executable (so that shims such as pyenv's are resolved once, at
	// start, and never paid for on each run) and its version.
	ProbeArgs []string
}

// Languages is every language codeexec knows, by canonical name.
var Languages = map[string]LanguageSpec{
	"python": {
		Name:         "python",
		Aliases:      []string{"py", "python3"},
		FileName:     "main.py",
		Interpreters: []string{"python3", "python"},
		// -I: isolated mode (no user site, no PYTHON* variables, neither
		// the script's folder nor the current one on sys.path), with or
		// without packages (see python.go); -B: write no .pyc files.
		Args:      []string{"-I", "-B"},
		ProbeArgs: []string{"-c", "import sys, platform; print(sys.executable); print(platform.python_version())"},
	},
	"javascript": {
		Name:         "javascript",
		Aliases:      []string{"js", "node", "nodejs"},
		FileName:     "main.js",
		Interpreters: []string{"node", "nodejs"},
		ProbeArgs:    []string{"-e", "console.log(process.execPath); console.log(process.versions.node)"},
	},
	"bash": {
		Name:         "bash",
		Aliases:      []string{"sh", "shell"},
		FileName:     "main.sh",
		Interpreters: []string{"bash"},
		// --noprofile/--norc: no start-up files from the host.
		Args:      []string{"--noprofile", "--norc"},
		ProbeArgs: []string{"-c", `echo "$BASH"; echo "$BASH_VERSION"`},
	},
}

// LanguageNames returns the canonical names, sorted.
func LanguageNames() []string {
	names := make([]string, 0, len(Languages))
	for n := range Languages {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// CanonicalLanguage maps a name or alias (case-insensitive, surrounding
// space ignored) to its canonical name. It returns an error wrapping
// ErrUnknownLanguage that lists the accepted names.
func CanonicalLanguage(name string) (string, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, spec := range Languages {
		if n == spec.Name {
			return spec.Name, nil
		}
		for _, a := range spec.Aliases {
			if n == a {
				return spec.Name, nil
			}
		}
	}
	return "", fmt.Errorf("%w %q: use one of %s", ErrUnknownLanguage, name, strings.Join(LanguageNames(), ", "))
}

// Interpreter is a resolved interpreter binary.
type Interpreter struct {
	Path    string
	Version string
}

// ResolveInterpreters finds the interpreter of each enabled language once:
// it looks up the candidates on PATH, asks the first one found for its real
// executable and version, and returns the found ones together with the status
// of every known language (unavailable ones carry a reason). enabled lists
// canonical names; a language not in it is reported as disabled. searchPath
// is the PATH to search ("" means the server's own PATH).
func ResolveInterpreters(ctx context.Context, enabled []string, searchPath string) (map[string]Interpreter, []LanguageStatus) {
	found := map[string]Interpreter{}
	var statuses []LanguageStatus
	for _, name := range LanguageNames() {
		spec := Languages[name]
		st := LanguageStatus{Name: name}
		if !slices.Contains(enabled, name) {
			st.Reason = "disabled by CODE_EXEC_LANGUAGES"
			statuses = append(statuses, st)
			continue
		}
		in, err := probeInterpreter(ctx, spec, searchPath)
		if err != nil {
			st.Reason = err.Error()
		} else {
			found[name] = in
			st.Available, st.Version, st.Interpreter = true, in.Version, in.Path
		}
		statuses = append(statuses, st)
	}
	return found, statuses
}

func probeInterpreter(ctx context.Context, spec LanguageSpec, searchPath string) (Interpreter, error) {
	var lookErr error
	where := "PATH"
	if searchPath != "" {
		where = searchPath
	}
	var names []string
	for _, cand := range interpreterCandidates(spec) {
		names = append(names, strings.Join(cand, " "))
		p, err := lookPathIn(cand[0], searchPath)
		if err == nil {
			err = acceptInterpreter(p)
		}
		if err != nil {
			lookErr = err
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		// Arguments of the candidate (py -3) come first; the probe must
		// then name the real executable, which runs without them.
		out, err := exec.CommandContext(pctx, p, append(slices.Clone(cand[1:]), spec.ProbeArgs...)...).Output()
		cancel()
		if err != nil {
			lookErr = fmt.Errorf("%s does not run: %w", p, err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		in := Interpreter{Path: p}
		if len(lines) >= 1 && filepath.IsAbs(strings.TrimSpace(lines[0])) {
			in.Path = strings.TrimSpace(lines[0])
		} else if len(cand) > 1 {
			lookErr = fmt.Errorf("%s did not name its executable", strings.Join(cand, " "))
			continue
		}
		if real, err := filepath.EvalSymlinks(in.Path); err == nil {
			in.Path = real
		}
		if len(lines) >= 2 {
			in.Version = strings.TrimSpace(lines[1])
		}
		return in, nil
	}
	return Interpreter{}, fmt.Errorf("interpreter not found: looked for %s in %s (%v)", strings.Join(names, ", "), where, lookErr)
}

// Lookup finds a language's spec and its resolved interpreter in interp (as
// returned by ResolveInterpreters). A language that is not in interp is
// unavailable, for the reason its status in langs gives. The error wraps
// ErrUnknownLanguage or ErrLanguageUnavailable.
func Lookup(lang string, interp map[string]Interpreter, langs []LanguageStatus) (LanguageSpec, Interpreter, error) {
	spec, ok := Languages[lang]
	if !ok {
		return spec, Interpreter{}, fmt.Errorf("%w %q: use one of %s", ErrUnknownLanguage, lang, strings.Join(LanguageNames(), ", "))
	}
	in, ok := interp[lang]
	if !ok {
		reason := "not enabled"
		for _, st := range langs {
			if st.Name == lang && st.Reason != "" {
				reason = st.Reason
			}
		}
		return spec, in, fmt.Errorf("%w: %s cannot run on this server: %s", ErrLanguageUnavailable, lang, reason)
	}
	return spec, in, nil
}

// lookPathIn is exec.LookPath over searchPath ("" means $PATH).
func lookPathIn(name, searchPath string) (string, error) {
	if searchPath == "" {
		return exec.LookPath(name)
	}
	for _, dir := range filepath.SplitList(searchPath) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

// ProgramArgs are the interpreter's arguments that run file as the main
// program: Args, then file. For python with packages (withPackages: the
// program finds its folder in PackagesVariable), Args are the same (-I
// keeps PYTHONPATH and every other start-up hook out of python's start) and
// a launcher runs file once python has started, with the packages on
// sys.path after the standard library (see PythonRunMain).
func (s LanguageSpec) ProgramArgs(file string, withPackages bool) []string {
	args := slices.Clone(s.Args)
	if withPackages && s.Name == "python" {
		args = append(args, "-c", pythonLauncher)
	}
	return append(args, file)
}
