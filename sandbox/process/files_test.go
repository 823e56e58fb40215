package process_test

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/datascience"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// requirePackages skips (or, with CODE_EXEC_REQUIRE_DATASCIENCE=1, fails)
// unless python programs can import every notable package.
func requirePackages(t *testing.T, r sandbox.Runner) {
	t.Helper()
	st, _ := r.Capabilities().Language("python")
	var missing []string
	for _, name := range datascience.NotablePackages {
		i := slices.IndexFunc(st.Packages, func(p sandbox.Package) bool { return p.Name == name && p.Available })
		if i < 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CODE_EXEC_REQUIRE_DATASCIENCE") == "1" {
		t.Fatalf("python cannot import %v here (CODE_EXEC_REQUIRE_DATASCIENCE=1; run .ci/ensure-datascience.sh)", missing)
	}
	t.Skipf("python cannot import %v here; run .ci/ensure-datascience.sh", missing)
}

func TestPythonPackagesAreListed(t *testing.T) {
	r := newRunner(t)
	st, _ := r.Capabilities().Language("python")
	var names []string
	for _, p := range st.Packages {
		names = append(names, p.Name)
		if p.Available && p.Version == "" {
			t.Errorf("%s is available without a version", p.Name)
		}
	}
	if !slices.Equal(names, datascience.NotablePackages) {
		t.Errorf("python packages %v, want %v", names, datascience.NotablePackages)
	}
}

// A CSV in, a pandas summary out, and the chart the program shows comes
// back as a PNG image that the program never saved: on an interpreter
// started for the run, and on one started ahead of it.
func TestChartsComeBackAsImages(t *testing.T) {
	t.Run("started for the run", func(t *testing.T) { checkChart(t, newRunner(t), nil) })
	t.Run("started ahead", func(t *testing.T) {
		r, err := process.New(context.Background(), process.Config{Languages: []string{"python"}, WorkRoot: WorkRoot(t),
			PoolSize: 1, PoolLimits: sandboxtest.HeavyReq("python", "").Limits})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		if !r.Capabilities().Active("runs kept apart") {
			t.Skip("runs are not kept apart on this host, so no interpreter starts ahead of its run")
		}
		checkChart(t, r, func() { waitLoaded(t, r, "python") })
		if process.LoadedTaken(r) != 1 {
			t.Fatal("the run was not served by an interpreter started ahead")
		}
	})
}

// checkChart runs the chart program on r, after ready (unless nil).
func checkChart(t *testing.T, r *process.Runner, ready func()) {
	requirePackages(t, r)
	if ready != nil {
		ready()
	}
	req := sandboxtest.HeavyReq("python", `
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv("temps.csv")
print(df["temp"].describe().to_string())
df.plot(x="city", y="temp", kind="bar")
plt.show()
`)
	in, err := artifacts.Decode([]artifacts.File{{Path: "temps.csv", Content: "city,temp\nOslo,3\nRome,18\nCairo,30\n"}}, artifacts.InputLimits{})
	if err != nil {
		t.Fatal(err)
	}
	req.Files, req.Artifacts = in, &artifacts.Options{}
	res, err := r.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "mean     17.0") {
		t.Fatalf("exit=%d timedOut=%v stdout=%q stderr=%q", res.ExitCode, res.TimedOut, res.Stdout, res.Stderr)
	}
	if res.Artifacts == nil || len(res.Artifacts.Artifacts) != 1 {
		t.Fatalf("artifacts %+v", res.Artifacts)
	}
	a := res.Artifacts.Artifacts[0]
	if a.Path != "figure_1.png" || a.Kind != artifacts.KindImage || a.MIMEType != "image/png" {
		t.Fatalf("artifact %s %v %s, want figure_1.png, an image/png", a.Path, a.Kind, a.MIMEType)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(a.Data))
	if err != nil || cfg.Width != 640 || cfg.Height != 480 {
		t.Errorf("figure_1.png: %v, %dx%d, want a 640x480 PNG", err, cfg.Width, cfg.Height)
	}
}

// In a session, a chart that a call shows comes back from that call, as a
// run's does; the data loaded by an earlier call is still there.
func TestChartsInASession(t *testing.T) {
	r := newRunner(t)
	requirePackages(t, r)
	sandboxtest.CheckSessionChart(t, r.Sessions())
}

// workspaceDir makes a workspace that the sandbox user can read (and, when
// writable, write), holding readme.txt.
func workspaceDir(t *testing.T, writable bool) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "readme.txt"), []byte("project notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	mode := os.FileMode(0o755)
	if writable {
		mode = 0o777
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestWorkspace(t *testing.T) {
	cases := []struct {
		name     string
		disable  []process.Feature
		require  string // the protection this case needs
		at       string // "" means the host folder
		enforced bool
	}{
		{"mount namespace", nil, "mount namespace", sandbox.WorkspacePath, true},
		{"Landlock alone", []process.Feature{process.FeatureMount}, "landlock", "", true},
		{"neither", []process.Feature{process.FeatureMount, process.FeatureLandlock}, "", "", false},
	}
	for _, c := range cases {
		for _, writable := range []bool{false, true} {
			name := c.name + map[bool]string{false: " ro", true: " rw"}[writable]
			t.Run(name, func(t *testing.T) {
				dir := workspaceDir(t, writable)
				r, err := process.New(context.Background(), process.Config{Languages: []string{"python", "bash"}, WorkRoot: WorkRoot(t), Disable: c.disable,
					Workspace: &sandbox.Workspace{Dir: dir, Writable: writable}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = r.Close() })
				if c.require != "" {
					requireActive(t, r, c.require)
				}
				at := c.at
				if at == "" {
					at = dir
				}
				ws := r.Capabilities().Workspace
				if ws == nil || ws.Path != at || ws.HostDir != dir || ws.Writable != writable || ws.Enforced != (c.enforced || writable) {
					t.Fatalf("sandbox_info workspace %+v, want at %s, enforced %v", ws, at, c.enforced || writable)
				}
				warned := slices.ContainsFunc(r.Capabilities().Warnings, func(w string) bool { return strings.Contains(w, "CODE_EXEC_WORKSPACE_MODE=ro is not enforced") })
				if warned != !ws.Enforced {
					t.Errorf("warnings %q", r.Capabilities().Warnings)
				}
				res := runCode(t, r, "bash", `echo "$WORKSPACE"; cat "$WORKSPACE/readme.txt"; echo; echo new > "$WORKSPACE/new.txt" && echo wrote`)
				lines := strings.Split(res.Stdout, "\n")
				if len(lines) < 2 || lines[0] != at || lines[1] != "project notes" {
					t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
				}
				_, statErr := os.Stat(filepath.Join(dir, "new.txt"))
				switch {
				case writable && (statErr != nil || !strings.Contains(res.Stdout, "wrote")):
					t.Errorf("a writable workspace was not written: %v, stdout %q stderr %q", statErr, res.Stdout, res.Stderr)
				case !writable && c.enforced && (statErr == nil || strings.Contains(res.Stdout, "wrote")):
					t.Errorf("a read-only workspace was written (stdout %q)", res.Stdout)
				}
				// A session sees it where a run does.
				s := sandboxtest.StartSession(t, r.Sessions(), "bash")
				if res := sandboxtest.SessionCall(t, s, "bash", `echo "$WORKSPACE"; cat "$WORKSPACE/readme.txt"`); res.Stdout != at+"\nproject notes" {
					t.Errorf("in a session: stdout %q stderr %q", res.Stdout, res.Stderr)
				}
			})
		}
	}
}

func TestWorkspaceMustBeAFolder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"relative/path", file, "/nonexistent/codeexec"} {
		_, err := process.New(context.Background(), process.Config{Languages: []string{"bash"}, WorkRoot: WorkRoot(t), Workspace: &sandbox.Workspace{Dir: dir}})
		if err == nil || !strings.Contains(err.Error(), "CODE_EXEC_WORKSPACE") {
			t.Errorf("workspace %q: %v", dir, err)
		}
	}
}
