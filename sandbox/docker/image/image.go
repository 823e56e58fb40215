// Package image is docker mode's sandbox image: its one Dockerfile, which
// the binary embeds, and how docker mode gets a missing image onto the
// engine at start (Fetcher): pulled when its name names a registry, built
// through the engine's build API when it is one of codeexec's own images
// (codeexec-sandbox:latest, codeexec-sandbox:datascience), and otherwise
// an error that says the exact command that gets it.
//
// docker/build-sandbox-image.sh builds the same Dockerfile from a
// checkout: the file in this folder is the only copy.
package image

import (
	"archive/tar"
	"bytes"
	_ "embed"
	"fmt"
	"io/fs"
	"strings"

	"github.com/distribution/reference"

	"github.com/codeexec/codeexec/sandbox/datascience"
)

// The images codeexec builds itself, the Dockerfile's targets they are
// built from, and the base they are built on by default.
const (
	// DefaultImage is docker mode's default sandbox image.
	DefaultImage = "codeexec-sandbox:latest"
	// DataScienceImage adds numpy, pandas, matplotlib, scipy and the
	// figure hook.
	DataScienceImage = "codeexec-sandbox:datascience"
	// TargetDefault and TargetDataScience are the Dockerfile's stages, and
	// the build script's --profile values.
	TargetDefault     = "default"
	TargetDataScience = "datascience"
	// DefaultBase is the base image of a build when
	// CODE_EXEC_DOCKER_BASE_IMAGE is not set (the Dockerfile's own default).
	DefaultBase = "debian:bookworm-slim"
)

// Targets maps the names of codeexec's own images to the Dockerfile's
// stage each is built from. A name matches as the engine reads it:
// codeexec-sandbox is codeexec-sandbox:latest.
var Targets = map[string]string{DefaultImage: TargetDefault, DataScienceImage: TargetDataScience}

//go:embed Dockerfile
var dockerfile []byte

// Dockerfile returns the sandbox images' Dockerfile (stages default and
// datascience, ARG BASE).
func Dockerfile() []byte { return bytes.Clone(dockerfile) }

// BuildContext returns the build context of the Dockerfile, as the engine's
// build API takes it (a tar stream): the Dockerfile and the figure hook's
// folder, codeexec_mpl/, as docker/build-sandbox-image.sh puts them.
func BuildContext() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(dockerfile); err != nil {
		return nil, err
	}
	hook := datascience.Files()
	err := fs.WalkDir(hook, datascience.Module, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: p + "/", Mode: 0o755, Typeflag: tar.TypeDir})
		}
		data, err := fs.ReadFile(hook, p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("the build context: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Registry returns the registry that ref names, by Docker's rule: the part
// before the first "/" when it holds a "." or a ":" or is "localhost"
// (docker.io counts: docker.io/library/debian:bookworm-slim names it). It
// returns "" when ref names none, as in codeexec-sandbox:latest or
// team/sandbox:1, which an engine would look for on Docker Hub.
func Registry(ref string) string {
	first, _, ok := strings.Cut(ref, "/")
	if !ok {
		return ""
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return first
	}
	return ""
}

// pullRegistry returns the registry a pull of ref reaches: the one it
// names, or docker.io when it names none.
func pullRegistry(ref string) string {
	if r := Registry(ref); r != "" {
		return r
	}
	if named, err := reference.ParseNormalizedNamed(ref); err == nil {
		return reference.Domain(named)
	}
	return "docker.io"
}

// Target returns the Dockerfile's stage that ref is built from when it is
// one of the images of targets (nil means Targets), compared as the engine
// reads names (codeexec-sandbox means codeexec-sandbox:latest). A name that
// names a registry, or pins a digest, is never built.
func Target(ref string, targets map[string]string) (string, bool) {
	if targets == nil {
		targets = Targets
	}
	name, ok := familiar(ref)
	if !ok || Registry(ref) != "" {
		return "", false
	}
	for img, target := range targets {
		if n, ok := familiar(img); ok && n == name {
			return target, true
		}
	}
	return "", false
}

// familiar returns ref as the engine lists it (with its tag, latest when
// it has none), or false when ref is not a name with a tag.
func familiar(ref string) (string, bool) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", false
	}
	if _, digested := named.(reference.Digested); digested {
		return "", false
	}
	return reference.FamiliarString(reference.TagNameOnly(named)), true
}
