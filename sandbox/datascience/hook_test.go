package datascience_test

import (
	"bytes"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/datascience"
)

// python returns Debian's python3 with matplotlib, or skips (fails with
// CODE_EXEC_REQUIRE_DATASCIENCE=1, which CI sets after
// .ci/ensure-datascience.sh).
func python(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	err := exec.Command(py, "-I", "-c", "import matplotlib, pandas").Run()
	if err == nil {
		return py
	}
	if os.Getenv("CODE_EXEC_REQUIRE_DATASCIENCE") == "1" {
		t.Fatalf("CODE_EXEC_REQUIRE_DATASCIENCE=1 but %s cannot import matplotlib and pandas (%v): run .ci/ensure-datascience.sh", py, err)
	}
	t.Skipf("%s cannot import matplotlib and pandas (%v): run .ci/ensure-datascience.sh", py, err)
	return ""
}

// run runs a python program in a fresh working directory with the hook
// installed, and returns the directory and the program's standard output
// (its standard error goes to the test's log).
func run(t *testing.T, code string, extraEnv ...string) (string, string) {
	t.Helper()
	py := python(t)
	hook := t.TempDir()
	if err := datascience.Install(hook); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	cmd := exec.Command(py, "-s", "-B", "-c", code)
	cmd.Dir = work
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + work, "PYTHONPATH=" + hook}, datascience.HookEnv("")...)
	cmd.Env = append(cmd.Env, extraEnv...)
	// Only stdout is the program's answer: matplotlib logs on stderr, for
	// one, "Matplotlib is building the font cache" when building it (in
	// the fresh HOME) takes more than 5 s, as it does on a busy machine.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	if stderr.Len() > 0 {
		t.Logf("stderr of the program: %s", stderr.String())
	}
	return work, string(out)
}

// pngs lists the PNG files in dir (not in hidden folders), checking that
// each is a 640x480 PNG (matplotlib's default figure).
func pngs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".png") {
			continue
		}
		names = append(names, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(data))
		if err != nil || cfg.Width != 640 || cfg.Height != 480 {
			t.Errorf("%s: %v, %dx%d, want a 640x480 PNG", e.Name(), err, cfg.Width, cfg.Height)
		}
	}
	slices.Sort(names)
	return names
}

func TestShownAndOpenFiguresAreSaved(t *testing.T) {
	t.Parallel()
	work, out := run(t, `
import matplotlib.pyplot as plt
plt.plot([1, 3, 2]); plt.show()                                  # figure_1
plt.figure(); plt.bar([1, 2], [3, 4]); plt.show(block=False)     # figure_2
fig = plt.figure(); plt.plot([1]); fig.savefig("mine.png")       # saved, unchanged: not again
plt.show()
fig = plt.figure(); plt.plot([1]); fig.savefig("mine2.png"); plt.title("changed")  # figure_3
fig = plt.figure(); plt.plot([1]); plt.savefig("mine3.png")      # saved, unchanged: not again
plt.figure(); plt.pie([1, 2])                                    # open at exit: figure_4
print("backend", plt.get_backend())
`)
	if !strings.Contains(out, "backend module://codeexec_mpl") {
		t.Errorf("output %q: the hook is not the backend", out)
	}
	want := []string{"figure_1.png", "figure_2.png", "figure_3.png", "figure_4.png", "mine.png", "mine2.png", "mine3.png"}
	if got := pngs(t, work); !slices.Equal(got, want) {
		t.Errorf("PNG files %v, want %v (output %q)", got, want, out)
	}
}

func TestFiguresNeverOverwriteTheProgramsFiles(t *testing.T) {
	t.Parallel()
	work, out := run(t, `
import matplotlib.pyplot as plt
open("figure_1.png", "wb").write(open("/dev/null", "rb").read())
df = __import__("pandas").DataFrame({"x": [1, 2, 3], "y": [3, 1, 2]})
df.plot(x="x", y="y")
raise SystemExit(3)
`)
	info, err := os.Stat(filepath.Join(work, "figure_1.png"))
	if err != nil || info.Size() != 0 {
		t.Errorf("the program's figure_1.png was overwritten: %v %v", info, err)
	}
	if _, err := os.Stat(filepath.Join(work, "figure_2.png")); err != nil {
		t.Errorf("the figure left open by a program that exits with an error was not saved: %v (output %q)", err, out)
	}
}

func TestFigureDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	work, out := run(t, `
import matplotlib.pyplot as plt
plt.plot([1]); plt.show()
`, "CODEEXEC_FIGURE_DIR="+dir)
	if got := pngs(t, dir); !slices.Equal(got, []string{"figure_1.png"}) {
		t.Errorf("CODEEXEC_FIGURE_DIR holds %v (output %q)", got, out)
	}
	if got := pngs(t, work); len(got) != 0 {
		t.Errorf("the working directory holds %v", got)
	}
}

// A program that does not plot never loads the hook (nor matplotlib).
func TestProgramsThatDoNotPlotPayNothing(t *testing.T) {
	t.Parallel()
	_, out := run(t, `
import sys
print("plain", "matplotlib" in sys.modules, "codeexec_mpl" in sys.modules)
import matplotlib, matplotlib.pyplot
print("imported", "codeexec_mpl" in sys.modules)
matplotlib.pyplot.figure()
print("plotted", "codeexec_mpl" in sys.modules)
`)
	if want := "plain False False\nimported False\nplotted True\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

func TestInstall(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "hooks")
	for range 2 {
		if err := datascience.Install(dir); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "codeexec_mpl", "__init__.py"))
	if err != nil || !bytes.Equal(got, datascience.Source()) {
		t.Fatalf("installed module: %v", err)
	}
	info, _ := os.Stat(filepath.Join(dir, "codeexec_mpl", "__init__.py"))
	if info.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", info.Mode().Perm())
	}
}
