package sandbox

// How python starts, in every mode, for runs and sessions.
//
// Python always starts isolated (-I, see Languages): no script folder and
// no current folder on sys.path, no PYTHON* variable (PYTHONPATH,
// PYTHONSTARTUP, PYTHONHOME, ...), no user site, so no usercustomize; its
// site processing sees only the interpreter's own site folders. Nothing of
// a run's files or of its packages can therefore run, or stand in for a
// module, while the interpreter starts, or while codeexec's own code
// (these bootstraps, the session driver, the restricted-Python policy)
// imports what it needs. A run's packages (PackageDir) are put on sys.path
// by that code once the interpreter has started, after the standard
// library and before the interpreter's site-packages: a package can never
// replace a standard module, and no .pth file of it is processed. The
// packages' own code runs only when the program imports them.

// PythonUsePackages is python source that defines
// _codeexec_use_packages(folder): it puts folder ("" or None: nothing) on
// sys.path after the standard library, before the first site-packages or
// dist-packages folder (at the end when there is none), as a plain entry:
// no .pth file of it is processed. Only codeexec's python code embeds and
// calls it, after its own imports.
const PythonUsePackages = `def _codeexec_use_packages(folder):
    import sys
    if not folder:
        return
    at = len(sys.path)
    for i, p in enumerate(sys.path):
        if p.rstrip("/").rsplit("/", 1)[-1] in ("site-packages", "dist-packages"):
            at = i
            break
    sys.path.insert(at, folder)
`

// PythonRunMain is python source that defines _codeexec_run_main(path,
// code, packages, prelude=None): it puts the packages folder on sys.path
// (see PythonUsePackages), removes codeexec's own names from __main__, and
// runs code (bytes) as the main program from path: sys.argv, __file__,
// tracebacks (its own frame is left out) and exit statuses as those of
// python3 -I -B path (an uncaught exception exits with 1, a
// KeyboardInterrupt with 130). A prelude, when given, is the code object
// of the program's first lines, compiled ahead: it runs first, and code is
// the rest of the program (its lines numbered as in the whole).
const PythonRunMain = PythonUsePackages + `def _codeexec_run_main(path, code, packages, prelude=None):
    import sys
    _codeexec_use_packages(packages)
    g = sys.modules["__main__"].__dict__
    for k in [k for k in g if k.startswith("_codeexec_")]:
        del g[k]
    g["__file__"] = path
    g["__cached__"] = None
    sys.argv[:] = [path]
    orig = getattr(sys, "orig_argv", [])
    if "-c" in orig:
        orig[orig.index("-c"):] = [path]
    try:
        if prelude is not None:
            exec(prelude, g)
        exec(compile(bytes(code), path, "exec", dont_inherit=True), g)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        e.__traceback__ = tb
        sys.excepthook(type(e), e, tb)
        sys.exit(130 if isinstance(e, KeyboardInterrupt) else 1)
`

// pythonLauncher runs a program file with packages: python -I -B -c
// pythonLauncher FILE, with the folder in PackagesVariable. It reads the
// file and starts it with _codeexec_run_main.
const pythonLauncher = PythonRunMain + `def _codeexec_launch():
    import os, sys
    with open(sys.argv[1], "rb") as f:
        code = f.read()
    _codeexec_run_main(sys.argv[1], code, os.environ.get("` + PackagesVariable + `"))
_codeexec_launch()
`
