// Package datascience holds what python runs need for data work beyond the
// interpreter: codeexec_mpl, the matplotlib backend that saves the figures a
// program shows (plt.show()) or leaves open at exit as PNG files in its
// working directory, so that they come back as image artifacts without the
// program saving them; Env, a python environment that makes the hook
// importable in process and none modes without loosening python's isolated
// mode; and Probe, which tells which notable packages an interpreter has.
//
// The hook's source is codeexec_mpl/__init__.py in this folder, the one
// copy: the Go binary embeds it for process and none modes (Install, NewEnv)
// and for docker mode's build of the data-science image (Files, in the build
// context of sandbox/docker/image), and docker/build-sandbox-image.sh copies
// it into that image from a checkout. A
// python activates it with MPLBACKEND=module://codeexec_mpl (see HookEnv);
// matplotlib imports it only when a program makes its first figure, so
// programs that do not plot pay nothing.
package datascience

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Backend is the value of MPLBACKEND that selects the hook.
const Backend = "module://codeexec_mpl"

// Module is the module's import name.
const Module = "codeexec_mpl"

//go:embed codeexec_mpl/*.py
var files embed.FS

// Files returns the module's files: the folder Module and what it holds,
// as they are copied into an image.
func Files() fs.FS { return files }

// Source returns the module's source (its __init__.py).
func Source() []byte {
	b, err := files.ReadFile(Module + "/__init__.py")
	if err != nil {
		panic(err) // embedded at build time
	}
	return b
}

// Install writes the module into dir (dir/codeexec_mpl/...), creating dir
// if needed, readable by everyone and writable by nobody else; dir is then
// the folder to put on the runs' python path. Installing twice rewrites the
// same files.
func Install(dir string) error {
	return fs.WalkDir(files, Module, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return fmt.Errorf("installing the matplotlib hook: %w", err)
			}
			return os.Chmod(dst, 0o755)
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return fmt.Errorf("installing the matplotlib hook: %w", err)
		}
		return os.Chmod(dst, 0o644)
	})
}

// HookEnv returns the environment variables that activate the hook in a
// python that finds the module on its path: MPLBACKEND, and
// CODEEXEC_FIGURE_DIR when figureDir is not "" (the folder figures go to;
// the working directory at the first figure otherwise).
func HookEnv(figureDir string) []string {
	env := []string{"MPLBACKEND=" + Backend}
	if figureDir != "" {
		env = append(env, "CODEEXEC_FIGURE_DIR="+figureDir)
	}
	return env
}
