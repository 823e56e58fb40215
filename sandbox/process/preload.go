package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// A prepared run of python or javascript starts its interpreter ahead of
// its request (see executor.Preload): in the run's final sandbox, as the
// run's user, under its limits and with its environment, the interpreter
// loads, writes executor.PreloadReady on its fd 3 and waits reading it.
// Nothing of the request is known then. At the hand-over the run's
// directory holds the program file and the request's files, as for any
// run, and the message on fd 3 is "g" followed by the request's
// environment (Request.Env: NUL-terminated KEY=value entries); the
// bootstrap puts the entries in the environment, closes fd 3 and runs the
// program file as the main program. An end of fd 3 without "g" (the run was
// discarded) ends the interpreter without running anything.

// preloadLanguages are the languages whose interpreter starts ahead.
var preloadLanguages = []string{"python", "javascript"}

// pythonPreload is python -I -B -c pythonPreload FILE PRELUDE COMPILED
// [MODULE...]: it imports the modules and compiles PRELUDE (python source;
// "" for none, which still warms the compiler up), or loads the prelude
// from the file COMPILED (see pythonAhead.compile; "" for none), waits for
// its run (see above), and runs FILE with
// sandbox.PythonRunMain: sys.argv, sys.orig_argv, __file__, __loader__,
// tracebacks and exit statuses as those of python3 -I -B FILE. When the
// program begins with PRELUDE, the prelude's code compiled ahead runs
// first, and only the rest of the program is compiled (its lines numbered
// as in the whole program).
const pythonPreload = sandbox.PythonRunMain + pythonAheadCode + `def _codeexec_preload():
    import os, sys
    path = sys.argv[1]
    for m in sys.argv[4:]:
        __import__(m)
    prelude, ahead = _codeexec_ahead(path, os.fsencode(sys.argv[2]), sys.argv[3])
    os.write(3, b"\x16")
    b = b""
    while True:
        c = os.read(3, 65536)
        if not c:
            break
        b += c
    os.close(3)
    if b[:1] != b"g":
        os._exit(125)
    for kv in b[1:].split(b"\0")[:-1]:
        k, _, v = kv.partition(b"=")
        os.environb[k] = v
    with open(path, "rb") as f:
        code = f.read()
    # The loader python3 FILE gives __main__.
    main = sys.modules["__main__"]
    main.__loader__ = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", path)
    if ahead is not None and code.startswith(prelude):
        _codeexec_run_main(path, b"\n" * prelude.count(b"\n") + code[len(prelude):], None, ahead)
    else:
        _codeexec_run_main(path, code, None)
_codeexec_preload()
`

// pythonAheadCode defines _codeexec_ahead(path, prelude, compiled): the
// prelude (bytes) and its code object as compile(prelude, path, "exec",
// dont_inherit=True) makes it (None for no prelude). When compiled (a
// file, see pythonAhead.compile) is not "", the prelude is the file's, and
// its code is loaded from the file when the file comes from this
// interpreter's version. Compiling the prelude, or nothing, also does what
// the first compile of a process does once (1 ms or more), which the
// program's then skips.
const pythonAheadCode = `def _codeexec_ahead(path, prelude, compiled):
    import sys
    if compiled:
        with open(compiled, "rb") as f:
            data = f.read()
        version, _, data = data.partition(b"\0")
        n, _, data = data.partition(b"\0")
        prelude, data = data[:int(n)], data[int(n):]
        if version == sys.version.encode():
            import marshal
            compile(b"", path, "exec", dont_inherit=True)
            def refile(c):
                return c.replace(co_filename=path, co_consts=tuple(refile(k) if isinstance(k, type(c)) else k for k in c.co_consts))
            return prelude, refile(marshal.loads(data))
    ahead = compile(prelude, path, "exec", dont_inherit=True)
    return prelude, ahead if prelude else None
`

// javascriptPreload is node [ARGS] -e javascriptPreload FILE: it waits for
// its run (see above), removes what node -e adds (the globals module,
// exports, require, __filename and __dirname; -e and this text from
// process.execArgv; process._eval) and runs FILE with Node's own entry point, as
// node [ARGS] FILE does (require.main === module, process.argv[1] === FILE).
const javascriptPreload = `(function () {
  'use strict';
  const fs = require('fs');
  const Module = require('module');
  const file = process.argv[1];
  const wait = new Int32Array(new SharedArrayBuffer(4));
  const buf = Buffer.alloc(65536);
  const chunks = [];
  fs.writeSync(3, '\x16');
  for (;;) {
    let n;
    try { n = fs.readSync(3, buf, 0, buf.length, null); } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
      Atomics.wait(wait, 0, 0, 1);
      continue;
    }
    if (n === 0) break;
    chunks.push(Buffer.from(buf.subarray(0, n)));
  }
  fs.closeSync(3);
  const msg = Buffer.concat(chunks);
  if (msg[0] !== 0x67) process.exit(125);
  for (const kv of msg.subarray(1).toString('utf8').split('\0').slice(0, -1)) {
    const i = kv.indexOf('=');
    process.env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  for (const k of ['module', 'exports', 'require', '__filename', '__dirname']) delete globalThis[k];
  const e = process.execArgv.indexOf('-e');
  if (e >= 0) process.execArgv.splice(e, 2);
  delete process._eval;
  Module.runMain(file);
})();
`

// preloadArgs are the arguments (after the interpreter's own, see
// interpreterArgs) of lang's interpreter started ahead to run file, with
// the python modules to import and the prelude to compile while it waits
// (see pythonPreload).
func preloadArgs(lang, file string, py pythonAhead) []string {
	spec := sandbox.Languages[lang]
	args := slices.Clone(spec.Args)
	switch lang {
	case "python":
		prelude := py.prelude
		if py.compiled != "" {
			prelude = ""
		}
		return append(append(args, "-c", pythonPreload, file, prelude, py.compiled), py.modules...)
	case "javascript":
		return append(args, "-e", javascriptPreload, file)
	}
	return nil
}

// preloadMessage is what starts the program of an interpreter started
// ahead: "g" and the request's environment env.
func preloadMessage(env []string) *executor.Preload {
	var b bytes.Buffer
	b.WriteByte('g')
	for _, kv := range env {
		b.WriteString(kv)
		b.WriteByte(0)
	}
	return &executor.Preload{Message: b.Bytes()}
}

// startupNames and startupPrefixes are the variables that an interpreter
// or the C library reads as the process starts: an interpreter started
// ahead started without the request's, so a request that sets one runs on
// an interpreter started for it.
var (
	startupNames    = []string{"LANG", "LANGUAGE", "TZ", "TZDIR", "GCONV_PATH", "LOCPATH"}
	startupPrefixes = []string{"LD_", "MALLOC_", "GLIBC_", "LC_", "PYTHON", "NODE_", "UV_", "OPENSSL_", "SSL_"}
)

// lateEnv reports whether an interpreter started ahead can take env (a
// request's environment) at its hand-over: every entry is NAME=value with
// no NUL, and no name is one an interpreter reads as it starts.
func lateEnv(env []string) bool {
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.IndexByte(kv, 0) >= 0 || slices.Contains(startupNames, name) {
			return false
		}
		for _, p := range startupPrefixes {
			if strings.HasPrefix(name, p) {
				return false
			}
		}
	}
	return true
}

// pythonAhead is what a python interpreter started ahead prepares while it
// waits (Config.PythonPreload and PythonPrelude).
type pythonAhead struct {
	modules []string
	prelude string
	// compiled is the file of the prelude compiled once (see compile), or
	// "".
	compiled string
}

// pythonCompile is python -I -B -c pythonCompile: it compiles its stdin as
// a prelude and writes the interpreter's version (sys.version), a NUL and
// the code object (marshal) on stdout.
const pythonCompile = `import marshal, sys
sys.stdout.buffer.write(sys.version.encode() + b"\0" + marshal.dumps(compile(sys.stdin.buffer.read(), "<prelude>", "exec", dont_inherit=True)))
`

// compiledName is the name of the compiled prelude's file.
const compiledName = "python-prelude"

// compile compiles the prelude once, with the python interpreter at path
// on the host (it is codeexec's own code, as trusted as this binary), into
// a file in dir that runs can read and not change: the interpreter's
// version, a NUL, the prelude's length in bytes, a NUL, the prelude and
// the code object (marshal). Interpreters started ahead load it rather than
// compile the prelude, and it stays out of their arguments (which each run
// passes through its supervisor and exec stage as JSON): for restricted
// Python's checker (30 KB of source), 0.2 ms of each run's CPU instead of 5
// ms. An interpreter of another version than this one (say, upgraded since)
// compiles the prelude from the file; every interpreter compiles it from
// its arguments when compile fails, which then says why.
func (py *pythonAhead) compile(ctx context.Context, path, dir string) error {
	if py.prelude == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(slices.Clone(sandbox.Languages["python"].Args), "-c", pythonCompile)...)
	cmd.Stdin = strings.NewReader(py.prelude)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s could not compile it: %v: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	version, code, ok := bytes.Cut(out, []byte{0})
	if !ok {
		return fmt.Errorf("%s compiled it to %d bytes without the version before them", path, len(out))
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\x00%d\x00%s", version, len(py.prelude), py.prelude)
	b.Write(code)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, compiledName)
	if err := os.WriteFile(file, b.Bytes(), 0o444); err != nil {
		return err
	}
	py.compiled = file
	return nil
}

var pythonModuleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// check checks the python modules to import ahead and the prelude.
func (py pythonAhead) check() error {
	for _, m := range py.modules {
		if !pythonModuleName.MatchString(m) {
			return fmt.Errorf("%q is not a python module name", m)
		}
	}
	if strings.IndexByte(py.prelude, 0) >= 0 || py.prelude != "" && !strings.HasSuffix(py.prelude, "\n") {
		return errors.New("the python prelude must be whole lines, without NUL")
	}
	return nil
}
