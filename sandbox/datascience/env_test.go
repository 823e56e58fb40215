package datascience_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/datascience"
)

// interpreter returns the real path of the host's python3, or skips.
func interpreter(t *testing.T) string {
	t.Helper()
	p, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Skipf("no /usr/bin/python3: %v", err)
	}
	return p
}

func TestEnvMakesTheHookImportableInIsolatedMode(t *testing.T) {
	t.Parallel()
	py := interpreter(t)
	dir := filepath.Join(t.TempDir(), "python")
	env, err := datascience.NewEnv(context.Background(), dir, py, "")
	if err != nil {
		t.Fatal(err)
	}
	if env.Python != filepath.Join(dir, "bin", "python3") || env.Interpreter != py || !strings.HasPrefix(env.SitePackages, dir+"/lib/python3.") {
		t.Errorf("env %+v", env)
	}
	// Making it again over the same folder works (a restart).
	if _, err := datascience.NewEnv(context.Background(), dir, py, ""); err != nil {
		t.Fatalf("second NewEnv: %v", err)
	}
	// In isolated mode, with nothing in the environment: the hook is found,
	// the system's packages' folders are still on the path, and the script's
	// folder is not.
	work := t.TempDir()
	cmd := exec.Command(env.Python, "-I", "-B", "-c", `
import importlib.util, sys
print(importlib.util.find_spec("codeexec_mpl").origin)
print(any(p.endswith("-packages") and not p.startswith(sys.prefix) for p in sys.path))
print("" in sys.path, sys.flags.isolated)
`)
	cmd.Env, cmd.Dir = []string{"PATH=/usr/bin:/bin"}, work
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := filepath.Join(env.SitePackages, "codeexec_mpl", "__init__.py") + "\nTrue\nFalse 1\n"
	if string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if err := env.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Remove left %s", dir)
	}
}

func TestEnvSavesFiguresInIsolatedMode(t *testing.T) {
	t.Parallel()
	python(t) // matplotlib or skip
	env, err := datascience.NewEnv(context.Background(), filepath.Join(t.TempDir(), "python"), interpreter(t), "")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	cmd := exec.Command(env.Python, "-I", "-B", "-c", "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n")
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + work}, datascience.HookEnv("")...)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := pngs(t, work); !slices.Equal(got, []string{"figure_1.png"}) {
		t.Errorf("PNG files %v, want [figure_1.png]", got)
	}
}

// A version that is not the interpreter's puts the hook where python does
// not look: NewEnv notices.
func TestNewEnvChecksTheHookIsFound(t *testing.T) {
	t.Parallel()
	_, err := datascience.NewEnv(context.Background(), t.TempDir(), interpreter(t), "2.7")
	if err == nil || !strings.Contains(err.Error(), "codeexec_mpl") {
		t.Errorf("NewEnv with the wrong version: %v", err)
	}
}

func TestNewEnvRefusesARelativeInterpreter(t *testing.T) {
	t.Parallel()
	if _, err := datascience.NewEnv(context.Background(), t.TempDir(), "python3", ""); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Errorf("NewEnv with a relative interpreter: %v", err)
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	py := interpreter(t)
	pkgs, err := datascience.Probe(context.Background(), py, "json", "no_such_package_xyz")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 2 || pkgs[0] != (sandbox.Package{Name: "json", Available: true}) || pkgs[1] != (sandbox.Package{Name: "no_such_package_xyz"}) {
		t.Errorf("Probe = %+v", pkgs)
	}
	if _, err := datascience.Probe(context.Background(), py, "os.path"); err == nil {
		t.Error("Probe accepted a dotted name")
	}
	python(t) // the notable packages or skip
	pkgs, err = datascience.Probe(context.Background(), py, datascience.NotablePackages...)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pkgs {
		if p.Name != datascience.NotablePackages[i] || !p.Available || p.Version == "" {
			t.Errorf("package %+v, want %s available with a version", p, datascience.NotablePackages[i])
		}
	}
}
