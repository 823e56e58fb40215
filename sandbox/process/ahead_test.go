package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
)

// compareAhead is python -I -B -c compareAhead PRELUDE COMPILED: it
// prints "same" when _codeexec_ahead gives PRELUDE and the code object that
// compiling PRELUDE gives (every field of every code object, nested ones
// too, with the run's file name), or the first difference.
const compareAhead = pythonAheadCode + `
import os, sys
path = "/run/dir/main.py"
prelude = os.fsencode(sys.argv[1])
source, got = _codeexec_ahead(path, b"" if sys.argv[2] else prelude, sys.argv[2])
if source != prelude:
    sys.exit("the prelude is not the source")
want = compile(prelude, path, "exec", dont_inherit=True)
names = [n for n in dir(want) if n.startswith("co_") and n not in ("co_consts", "co_lnotab")]
def diff(a, b, where):
    if type(a) is not type(b):
        return "%s: %s against %s" % (where, type(a).__name__, type(b).__name__)
    if not isinstance(a, type(want)):
        return None if a == b else "%s: %r against %r" % (where, a, b)
    for n in names:
        x, y = getattr(a, n), getattr(b, n)
        if callable(x):
            x, y = list(x()), list(y())
        if x != y:
            return "%s.%s: %r against %r" % (where, n, x, y)
    if len(a.co_consts) != len(b.co_consts):
        return "%s.co_consts: %d against %d" % (where, len(a.co_consts), len(b.co_consts))
    for i, (x, y) in enumerate(zip(a.co_consts, b.co_consts)):
        d = diff(x, y, "%s/%s" % (where, getattr(x, "co_name", i)))
        if d:
            return d
    return None
print(diff(got, want, "<module>") or "same")
`

// The prelude that interpreters started ahead load compiled is the code
// that compiling its source in the run gives; from an interpreter of
// another version, or not compiled at all, the source is compiled.
func TestCompiledPrelude(t *testing.T) {
	interp, _ := sandbox.ResolveInterpreters(context.Background(), []string{"python"}, os.Getenv("PATH"))
	python, ok := interp["python"]
	if !ok {
		t.Skip("no python here")
	}
	dir := t.TempDir()
	py := pythonAhead{prelude: pypolicy.Prelude()}
	if err := py.compile(context.Background(), python.Path, dir); err != nil {
		t.Fatal(err)
	}
	if py.compiled != filepath.Join(dir, compiledName) {
		t.Fatalf("the prelude was not compiled into %s: %q", dir, py.compiled)
	}
	if fi, err := os.Stat(py.compiled); err != nil || fi.Mode().Perm() != 0o444 {
		t.Fatalf("the compiled prelude is not read-only: %v %v", fi.Mode(), err)
	}
	// Another prelude's code after this prelude: loaded, it differs; it
	// is loaded only when the file says it comes from this version.
	elsewhere := pythonAhead{prelude: "x = 2\n"}
	if err := elsewhere.compile(context.Background(), python.Path, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(elsewhere.compiled)
	if err != nil {
		t.Fatal(err)
	}
	version, rest, _ := strings.Cut(string(raw), "\x00")
	_, rest, _ = strings.Cut(rest, "\x00")
	code := rest[len(elsewhere.prelude):]
	mixed := func(version string) string {
		f := filepath.Join(t.TempDir(), compiledName)
		data := version + "\x00" + strconv.Itoa(len(py.prelude)) + "\x00" + py.prelude + code
		if err := os.WriteFile(f, []byte(data), 0o444); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, c := range []struct {
		name, compiled string
		same           bool
	}{
		{"loaded", py.compiled, true},
		{"not compiled", "", true},
		{"another version", mixed("2.7.18 (another python)"), true},
		{"this version", mixed(version), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := exec.Command(python.Path, "-I", "-B", "-c", compareAhead, py.prelude, c.compiled).CombinedOutput()
			same := err == nil && strings.TrimSpace(string(out)) == "same"
			if same != c.same {
				t.Fatalf("the prelude ahead is the one compiled in the run: %v, want %v: %v\n%s", same, c.same, err, out)
			}
		})
	}
}

// When the prelude cannot be compiled ahead, the error says by what.
func TestCompilePreludeFails(t *testing.T) {
	py := pythonAhead{prelude: "x = 1\n"}
	err := py.compile(context.Background(), "/bin/false", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "/bin/false could not compile it") || py.compiled != "" {
		t.Fatalf("%v %q", err, py.compiled)
	}
}
