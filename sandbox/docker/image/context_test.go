package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/datascience"
)

// TestBuildContext: the build context holds this folder's Dockerfile and
// the figure hook as sandbox/datascience embeds it.
func TestBuildContext(t *testing.T) {
	t.Parallel()
	data, err := BuildContext()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = b
	}
	onDisk, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got["Dockerfile"], onDisk) || !bytes.Equal(Dockerfile(), onDisk) {
		t.Errorf("the build context's Dockerfile is not this folder's")
	}
	if !bytes.Equal(got["codeexec_mpl/__init__.py"], datascience.Source()) {
		t.Errorf("the build context lacks the figure hook: it holds %d entries", len(got))
	}
	for _, stage := range []string{"AS " + TargetDefault, "AS " + TargetDataScience, "ARG BASE=" + DefaultBase, "COPY codeexec_mpl/"} {
		if !bytes.Contains(onDisk, []byte(stage)) {
			t.Errorf("the Dockerfile lacks %q", stage)
		}
	}
}

// TestOneDockerfile: the build script builds this folder's Dockerfile, and
// no other file of the repository defines the sandbox images' stages.
func TestOneDockerfile(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	script, err := os.ReadFile(filepath.Join(root, "docker", "build-sandbox-image.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(script, []byte("sandbox/docker/image/Dockerfile")) {
		t.Errorf("docker/build-sandbox-image.sh does not build sandbox/docker/image/Dockerfile")
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.Contains(d.Name(), "Dockerfile") || p == filepath.Join(root, "sandbox", "docker", "image", "Dockerfile") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte("AS "+TargetDataScience)) {
			t.Errorf("%s is a second copy of the sandbox images' Dockerfile", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
