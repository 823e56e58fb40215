package datascience

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// Env is a python environment for process and none modes, in the manner of
// `python3 -m venv --system-site-packages --without-pip`: a folder with a
// pyvenv.cfg, bin/python3 (a symbolic link to the interpreter) and a
// site-packages of its own that holds codeexec_mpl, while the system's
// packages (numpy, pandas, ...) stay visible.
//
// Python finds the environment from the path it was started by, so running
// Env.Python with -I (isolated mode: no PYTHON* variables, no user site, no
// script folder on the path) still finds the hook: no launcher, no
// environment variable, tracebacks and sys.argv exactly as with the
// interpreter itself. Only sys.prefix and sys.executable name the
// environment.
//
// Runs only read the environment; a run in a mount namespace needs Dir
// visible (read-only) at the same path.
type Env struct {
	// Dir is the environment's folder.
	Dir string
	// Python is Dir/bin/python3: what runs execute instead of Interpreter.
	Python string
	// Interpreter is the real interpreter the environment uses.
	Interpreter string
	// SitePackages is the environment's own site-packages folder.
	SitePackages string
}

// probeTimeout bounds each start-up probe of an interpreter.
const probeTimeout = 20 * time.Second

// NewEnv makes the environment in dir (which it creates; it must not hold
// anything else) for the interpreter at python (an absolute path, symbolic
// links resolved) of the given version ("3.11.2" or "3.11"; "" asks the
// interpreter), installs codeexec_mpl in it, and checks that the
// environment's python, in isolated mode, finds the hook there. The folders
// are world-readable, so that a run as another user can use them.
func NewEnv(ctx context.Context, dir, python, version string) (*Env, error) {
	if !filepath.IsAbs(python) {
		return nil, fmt.Errorf("python environment: the interpreter %q is not an absolute path", python)
	}
	if parts := strings.Split(version, "."); len(parts) >= 2 && parts[0] != "" && parts[1] != "" {
		version = parts[0] + "." + parts[1]
	} else {
		v, err := pythonVersion(ctx, python)
		if err != nil {
			return nil, err
		}
		version = v
	}
	env := &Env{
		Dir:          dir,
		Python:       filepath.Join(dir, "bin", "python3"),
		Interpreter:  python,
		SitePackages: filepath.Join(dir, "lib", "python"+version, "site-packages"),
	}
	for _, d := range []string{dir, filepath.Join(dir, "bin"), env.SitePackages} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("python environment: %w", err)
		}
	}
	cfg := fmt.Sprintf("home = %s\ninclude-system-site-packages = true\nversion = %s\n", filepath.Dir(python), version)
	if err := os.WriteFile(filepath.Join(dir, "pyvenv.cfg"), []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("python environment: %w", err)
	}
	// python3 and python, as a venv has: a program that starts "python3"
	// from PATH gets the environment too.
	for _, name := range []string{"python3", "python"} {
		link := filepath.Join(dir, "bin", name)
		_ = os.Remove(link)
		if err := os.Symlink(python, link); err != nil {
			return nil, fmt.Errorf("python environment: %w", err)
		}
	}
	if err := Install(env.SitePackages); err != nil {
		return nil, err
	}
	// Every folder down to the module world-searchable, whatever the umask.
	for d := env.SitePackages; ; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, fmt.Errorf("python environment: %w", err)
		}
		if d == dir {
			break
		}
	}
	spec, err := findHook(ctx, env.Python)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(spec, env.SitePackages+string(filepath.Separator)) {
		return nil, fmt.Errorf("python environment: %s -I finds codeexec_mpl at %q, not in %s", env.Python, spec, env.SitePackages)
	}
	return env, nil
}

// Remove deletes the environment's folder. Safe to call twice.
func (e *Env) Remove() error { return os.RemoveAll(e.Dir) }

// Bin is the environment's bin folder, to put first on a run's PATH.
func (e *Env) Bin() string { return filepath.Join(e.Dir, "bin") }

func pythonVersion(ctx context.Context, python string) (string, error) {
	out, err := runPython(ctx, python, `import sys; print("%d.%d" % sys.version_info[:2])`)
	if err != nil {
		return "", fmt.Errorf("python environment: asking %s its version: %w", python, err)
	}
	v := strings.TrimSpace(out)
	if v == "" || strings.ContainsAny(v, "/ \n") {
		return "", fmt.Errorf("python environment: %s gave the version %q", python, v)
	}
	return v, nil
}

// findHook returns where the environment's python, in isolated mode, finds
// codeexec_mpl ("" when it does not).
func findHook(ctx context.Context, python string) (string, error) {
	out, err := runPython(ctx, python, `import importlib.util as u; s = u.find_spec("codeexec_mpl"); print(s.origin if s else "")`)
	if err != nil {
		return "", fmt.Errorf("python environment: %s cannot start: %w", python, err)
	}
	return strings.TrimSpace(out), nil
}

// runPython runs a short program with python -I -B and a minimal
// environment, and returns its stdout.
func runPython(ctx context.Context, python, code string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"-I", "-B", "-c", code}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/nonexistent"}
	cmd.Dir = "/"
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = msg[len(msg)-500:]
		}
		if msg != "" {
			return "", fmt.Errorf("%w: %s", err, msg)
		}
		return "", err
	}
	return stdout.String(), nil
}

// NotablePackages are the packages that sandbox_info reports for python.
var NotablePackages = []string{"numpy", "pandas", "matplotlib", "scipy"}

// ProbeProgram tells, for each name in sys.argv[1:], whether python can
// import it, without importing it (importlib.util.find_spec on a top-level
// name only reads the path), and its distribution's version from its
// metadata, as one line of JSON: a list of sandbox.Package.
const ProbeProgram = `import importlib.util, importlib.metadata, json, sys
out = []
for name in sys.argv[1:]:
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    version = ""
    if found:
        try:
            version = importlib.metadata.version(name)
        except Exception:
            pass
    out.append({"name": name, "available": found, "version": version})
print(json.dumps(out))
`

// Probe tells which of names the interpreter at python (an interpreter or
// an Env's Python) can import, in isolated mode, in one short run.
func Probe(ctx context.Context, python string, names ...string) ([]sandbox.Package, error) {
	if len(names) == 0 {
		return nil, nil
	}
	for _, n := range names {
		if n == "" || strings.HasPrefix(n, "-") || strings.ContainsAny(n, "./ ") {
			return nil, fmt.Errorf("probing python packages: %q is not a top-level package name", n)
		}
	}
	out, err := runPython(ctx, python, ProbeProgram, names...)
	if err != nil {
		return nil, fmt.Errorf("probing python packages with %s: %w", python, err)
	}
	var pkgs []sandbox.Package
	if err := json.Unmarshal([]byte(out), &pkgs); err != nil {
		return nil, fmt.Errorf("probing python packages with %s: %w", python, err)
	}
	if len(pkgs) != len(names) {
		return nil, errors.New("probing python packages: the answer does not match the question")
	}
	return pkgs, nil
}
