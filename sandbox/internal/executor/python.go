package executor

import (
	"context"
	"log/slog"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/datascience"
)

// PreparePython checks which notable packages the python interpreter in
// can import and, when matplotlib is among them, makes in workRoot/python
// the environment whose python saves the figures that programs show (see
// datascience.Env). It returns the packages (nil when the probe failed) and
// the environment (nil when there is none). Nothing here stops the server:
// failures are logged and python runs as it is.
func PreparePython(ctx context.Context, workRoot string, in sandbox.Interpreter, log *slog.Logger) (*datascience.Env, []sandbox.Package) {
	pkgs, err := datascience.Probe(ctx, in.Path, datascience.NotablePackages...)
	if err != nil {
		log.Warn("could not tell which python packages programs can import", "err", err)
		return nil, nil
	}
	for _, p := range pkgs {
		if p.Name != "matplotlib" || !p.Available {
			continue
		}
		env, err := datascience.NewEnv(ctx, filepath.Join(workRoot, "python"), in.Path, in.Version)
		if err != nil {
			log.Warn("matplotlib figures will not come back by themselves: the python environment with the figure hook could not be made", "err", err)
			return nil, pkgs
		}
		return env, pkgs
	}
	return nil, pkgs
}

// PythonEnv returns env (a run's environment) set up for python runs in
// the environment py: py's bin folder first on PATH (so that "python3" in a
// subprocess is py's too) and the figure hook's variables.
func PythonEnv(env []string, py *datascience.Env) []string {
	out := make([]string, 0, len(env)+2)
	path := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			kv = "PATH=" + py.Bin() + ":" + v
			path = true
		}
		if strings.HasPrefix(kv, "MPLBACKEND=") {
			continue
		}
		out = append(out, kv)
	}
	if !path {
		out = append(out, "PATH="+py.Bin()+":"+MinimalPath)
	}
	return append(out, datascience.HookEnv("")...)
}

// ThreadEnv sizes the thread pools of numerical libraries (OpenBLAS, OpenMP,
// MKL) to a run's CPU limit. Left alone, OpenBLAS starts a thread per core of
// the host and reserves a buffer for each: under an address-space limit of a
// few hundred megabytes, importing numpy then fails with MemoryError.
func ThreadEnv(cpus float64) []string {
	n := 1
	if cpus > 1 {
		n = int(math.Ceil(cpus))
	}
	v := strconv.Itoa(n)
	return []string{"OPENBLAS_NUM_THREADS=" + v, "OMP_NUM_THREADS=" + v, "MKL_NUM_THREADS=" + v}
}
