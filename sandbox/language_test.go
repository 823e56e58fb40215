package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
)

func TestCanonicalLanguage(t *testing.T) {
	for in, want := range map[string]string{"python": "python", " Py ": "python", "python3": "python", "JS": "javascript", "node": "javascript", "sh": "bash", "bash": "bash"} {
		if got, err := sandbox.CanonicalLanguage(in); err != nil || got != want {
			t.Errorf("CanonicalLanguage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := sandbox.CanonicalLanguage("cobol")
	if !errors.Is(err, sandbox.ErrUnknownLanguage) || !strings.Contains(err.Error(), "bash, javascript, python") {
		t.Fatalf("unknown language error = %v", err)
	}
}

// A language whose interpreter is missing is reported unavailable, with the
// reason, and the others still resolve.
func TestResolveInterpretersMissing(t *testing.T) {
	dir := t.TempDir()
	bash, err := filepath.EvalSymlinks("/bin/bash")
	if err != nil {
		t.Skip("no /bin/bash")
	}
	if err := os.Symlink(bash, filepath.Join(dir, "bash")); err != nil {
		t.Fatal(err)
	}
	found, statuses := sandbox.ResolveInterpreters(context.Background(), []string{"bash", "python"}, dir)
	if _, ok := found["bash"]; !ok {
		t.Fatalf("bash not resolved: %+v", statuses)
	}
	if _, ok := found["python"]; ok {
		t.Fatal("python resolved from a directory without it")
	}
	byName := map[string]sandbox.LanguageStatus{}
	for _, s := range statuses {
		byName[s.Name] = s
	}
	if st := byName["python"]; st.Available || !strings.Contains(st.Reason, "interpreter not found") {
		t.Errorf("python status = %+v", st)
	}
	if st := byName["javascript"]; st.Available || !strings.Contains(st.Reason, "CODE_EXEC_LANGUAGES") {
		t.Errorf("a disabled language must say so: %+v", st)
	}
	if st := byName["bash"]; !st.Available || st.Version == "" || st.Interpreter != bash {
		t.Errorf("bash status = %+v (want interpreter %s)", st, bash)
	}
}

// TestProgramArgs: python starts isolated (-I) with or without packages;
// with them, a launcher runs the file once python has started.
func TestProgramArgs(t *testing.T) {
	py := sandbox.Languages["python"]
	if got := py.ProgramArgs("/w/main.py", false); strings.Join(got, " ") != "-I -B /w/main.py" {
		t.Errorf("python without packages: %q", got)
	}
	got := py.ProgramArgs("/w/main.py", true)
	if len(got) != 5 || got[0] != "-I" || got[1] != "-B" || got[2] != "-c" || !strings.Contains(got[3], "_codeexec_run_main(") || got[4] != "/w/main.py" {
		t.Errorf("python with packages: %q", got)
	}
	if got := sandbox.Languages["bash"].ProgramArgs("/w/main.sh", true); strings.Join(got, " ") != "--noprofile --norc /w/main.sh" {
		t.Errorf("bash: %q", got)
	}
}
