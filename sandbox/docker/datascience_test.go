package docker

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

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

// The data-science image runs pandas and matplotlib in the usual locked-down
// container (read-only root, /tmp only), and a figure that the program shows
// is saved as a PNG file in its working directory without the program
// saving it; plain python does not load matplotlib.
func TestDataScienceImage(t *testing.T) {
	t.Parallel()
	cli := engine(t)
	img := testDataScienceImage()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, img); err != nil {
		skipOrFail(t, "the data-science image %s is missing (build it with %s --profile datascience): %v", img, BuildCommand, err)
	}
	r, _ := newRunner(t, Config{Image: img, Languages: []string{"python"}})
	res := run(t, r, sandboxtest.Req("python", `
import io, os, sys
print("plain", "matplotlib" in sys.modules)
import pandas as pd
df = pd.read_csv(io.StringIO("city,temp\nOslo,3\nRome,18\nCairo,30\n"))
print("mean", df["temp"].mean())
import matplotlib.pyplot as plt
df.plot.bar(x="city", y="temp")
plt.show()
print("files", sorted(f for f in os.listdir(".") if f.endswith(".png")))
import numpy, scipy.stats
print("scipy", round(float(scipy.stats.norm.cdf(0)), 2))
`))
	if res.ExitCode != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	want := "plain False\nmean 17.0\nfiles ['figure_1.png']\nscipy 0.5\n"
	if res.Stdout != want {
		t.Errorf("stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	if strings.Contains(res.Stderr, "Warning") || strings.Contains(res.Stderr, "not writable") {
		t.Errorf("stderr: %s", res.Stderr)
	}
}
