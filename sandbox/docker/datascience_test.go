package docker

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// DataScienceImage is the image that docker/build-sandbox-image.sh
// --profile datascience builds.
const dataScienceImage = "codeexec-sandbox:datascience"

func testDataScienceImage() string {
	if img := os.Getenv("CODE_EXEC_DATASCIENCE_IMAGE"); img != "" {
		return img
	}
	return dataScienceImage
}

// requireDataScienceImage returns the data-science image, skipping (or
// failing, with CODE_EXEC_REQUIRE_DOCKER=1) when it is missing.
func requireDataScienceImage(t *testing.T) string {
	t.Helper()
	cli := engine(t)
	img := testDataScienceImage()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, img); err != nil {
		skipOrFail(t, "the data-science image %s is missing (build it with %s --profile datascience): %v", img, BuildCommand, err)
	}
	return img
}

// The data-science image runs pandas and matplotlib in the usual locked-down
// container (read-only root, /tmp only): a CSV in, a summary out, and the
// figure that the program shows comes back as a PNG image without the
// program saving it; plain python does not load matplotlib; sandbox_info
// lists the packages.
func TestDataScienceImage(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, Config{Image: requireDataScienceImage(t), Languages: []string{"python"}})
	st, _ := r.Capabilities().Language("python")
	var listed []string
	for _, p := range st.Packages {
		if p.Available && p.Version != "" {
			listed = append(listed, p.Name)
		}
	}
	if strings.Join(listed, " ") != "numpy pandas matplotlib scipy" {
		t.Errorf("sandbox_info python packages %+v", st.Packages)
	}
	req := sandboxtest.HeavyReq("python", `
import os, sys
print("plain", "matplotlib" in sys.modules)
import pandas as pd
df = pd.read_csv("temps.csv")
print("mean", df["temp"].mean())
import matplotlib.pyplot as plt
df.plot.bar(x="city", y="temp")
plt.show()
import scipy.stats
print("scipy", round(float(scipy.stats.norm.cdf(0)), 2))
`)
	in, err := artifacts.Decode([]artifacts.File{{Path: "temps.csv", Content: "city,temp\nOslo,3\nRome,18\nCairo,30\n"}}, artifacts.InputLimits{})
	if err != nil {
		t.Fatal(err)
	}
	req.Files, req.Artifacts = in, &artifacts.Options{}
	res := run(t, r, req)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	want := "plain False\nmean 17.0\nscipy 0.5\n"
	// Each run has a fresh HOME, so matplotlib builds its font cache, and
	// says so on stderr when that takes more than 5 s (a busy machine);
	// nothing else may be there.
	stderr := strings.Replace(res.Stderr, "Matplotlib is building the font cache; this may take a moment.\n", "", 1)
	if res.Stdout != want || stderr != "" {
		t.Errorf("stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	if res.Artifacts == nil || len(res.Artifacts.Artifacts) != 1 {
		t.Fatalf("artifacts %+v", res.Artifacts)
	}
	a := res.Artifacts.Artifacts[0]
	cfg, err := png.DecodeConfig(bytes.NewReader(a.Data))
	if a.Path != "figure_1.png" || a.Kind != artifacts.KindImage || err != nil || cfg.Width != 640 || cfg.Height != 480 {
		t.Errorf("artifact %s %v: %v %dx%d, want figure_1.png, a 640x480 PNG image", a.Path, a.Kind, err, cfg.Width, cfg.Height)
	}
}

// In a session of the data-science image, a chart that a call shows comes
// back from that call; the data an earlier call loaded is still there.
func TestDataScienceSession(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, Config{Image: requireDataScienceImage(t), Languages: []string{"python"}})
	sandboxtest.CheckSessionChart(t, r.Sessions())
}

// The workspace is at /workspace, named by WORKSPACE; read-only really is
// read-only (a mount below it is not carried over), and read-write can be
// written.
func TestWorkspace(t *testing.T) {
	t.Parallel()
	for _, writable := range []bool{false, true} {
		t.Run(map[bool]string{false: "ro", true: "rw"}[writable], func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "readme.txt"), []byte("project notes"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o777); err != nil { // the container's uid may write when allowed
				t.Fatal(err)
			}
			r, _ := newRunner(t, Config{Languages: []string{"bash"}, Workspace: &sandbox.Workspace{Dir: dir, Writable: writable}})
			ws := r.Capabilities().Workspace
			if ws == nil || ws.Path != "/workspace" || ws.HostDir != dir || ws.Writable != writable || !ws.Enforced {
				t.Fatalf("sandbox_info workspace %+v", ws)
			}
			res := run(t, r, sandboxtest.Req("bash", `echo "$WORKSPACE"; cat "$WORKSPACE/readme.txt"; echo; echo new > "$WORKSPACE/new.txt" && echo wrote`))
			if !strings.HasPrefix(res.Stdout, "/workspace\nproject notes\n") {
				t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			_, statErr := os.Stat(filepath.Join(dir, "new.txt"))
			wrote := strings.Contains(res.Stdout, "wrote")
			if writable != (wrote && statErr == nil) {
				t.Errorf("writable=%v but the program wrote=%v (file: %v); stderr %q", writable, wrote, statErr, res.Stderr)
			}
			if !writable && !strings.Contains(res.Stderr, "Read-only file system") {
				t.Errorf("stderr %q, want a read-only file system error", res.Stderr)
			}
			// A session sees it where a run does.
			s := sandboxtest.StartSession(t, r.Sessions(), "bash")
			if res := sandboxtest.SessionCall(t, s, "bash", `echo "$WORKSPACE"; cat "$WORKSPACE/readme.txt"`); res.Stdout != "/workspace\nproject notes" {
				t.Errorf("in a session: stdout %q stderr %q", res.Stdout, res.Stderr)
			}
		})
	}
}
