package docker

import (
	"fmt"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
)

// How a run container is fed and how it reports back.
//
// Every run container, warm (pooled) or cold, has the same two processes:
//
//   - PID 1 is a small POSIX sh supervisor. It starts the language's
//     bootstrap as its only child, waits for that child to exit, and then
//     kills every process the program left behind (kill -9 -1: all of the
//     container but PID 1), and writes a trailer line, "<nonce> <exit status>
//     <oom kills>\n", to both stdout and stderr before it exits itself (which
//     ends the container). The nonce is 128 random bits
//     chosen by the server when it creates the container, so program output
//     can never be mistaken for a trailer by accident. The trailer lets the
//     server return the result as soon as the program has exited, without
//     waiting for the engine to notice the exit (about 30-50 ms on a small
//     host) and without asking the engine anything on the way.
//   - The bootstrap is the interpreter itself, already loaded: python3 and
//     node run a short program that writes one ready byte to stdout, then
//     blocks reading the header "<code length in bytes> <language>\n" and
//     exactly that many bytes of code from the attached stdin (never more:
//     the rest of the stream is the program's standard input), writes the
//     code to /tmp/main.<ext> (for tracebacks), writes one ack byte to stdout
//     and runs the code as the main program. For bash, dash reads the header
//     and the code and execs bash on the file.
//
// A container can therefore be created and started long before a request
// arrives (see pool.go), and a run on it costs one write to the attach
// stream and reading the answer. The ready byte says the interpreter is
// loaded; the ack byte says the program was received, so a container that
// breaks before the ack can be replaced by a cold one without running the
// program twice.
//
// The header only selects an interpreter that the server resolved at start;
// nothing a request contains is ever interpreted by a shell.

const (
	// readyMarker is the first byte of a bootstrap's stdout: the interpreter
	// is loaded and waits for the program.
	readyMarker = 0x16
	// ackMarker is the second byte: the program was received in full and
	// is about to run.
	ackMarker = 0x06
	// trailerTag starts every nonce, to make a trailer easy to spot by eye.
	trailerTag = "@@codeexec-end-"
	// maxTrailer bounds the line after the nonce ("<status> <oom kills>\n").
	maxTrailer = 64
)

// supervisorScript is PID 1 of a run container: sh -c supervisorScript
// codeexec-supervisor <nonce> <bootstrap command...>.
//
// The supervisor ignores every signal that can be ignored but SIGCHLD (the
// program may signal its pid 1, and must not end the run that way), so that
// the run always ends with its trailer. The child's stdin is the container's
// stdin (an asynchronous list would get /dev/null otherwise), and env
// --default-signal sets every signal back to its default for the program
// (sh ignores SIGINT and SIGQUIT in asynchronous lists too), so the program
// starts with the dispositions it would have as a foreground command. The
// number of OOM kills comes from the container's own memory cgroup (v2 or v1).
const supervisorScript = `n=$1; shift
trap '' 1 2 3 4 5 6 7 8 10 11 12 13 14 15 16 20 21 22 23 24 25 26 27 28 29 30 31 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64
exec 3<&0
env --default-signal "$@" <&3 3<&- &
wait $!
rc=$?
kill -9 -1 2>/dev/null
o=-
for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
  if [ -r "$f" ]; then
    o=0
    while read -r k v; do if [ "$k" = oom_kill ]; then o=$v; fi; done < "$f"
    break
  fi
done
printf '%s %s %s\n' "$n" "$rc" "$o"
printf '%s %s %s\n' "$n" "$rc" "$o" >&2
`

// pythonBootstrap runs the program as __main__ in the already-started
// interpreter: sys.argv, __file__, tracebacks (the bootstrap's own frame is
// left out) and exit statuses are those of python3 -I -B /tmp/main.py.
const pythonBootstrap = `import os, sys
def _codeexec_main():
    def fail(msg):
        os.write(2, b"codeexec: " + msg + b"\n")
        os._exit(125)
    os.write(1, b"\x16")
    h = b""
    while not h.endswith(b"\n"):
        c = os.read(0, 1)
        if not c:
            fail(b"no program received")
        h += c
    try:
        n, lang = h.split()
        n = int(n)
    except ValueError:
        fail(b"bad program header")
    if lang != b"python":
        fail(b"this container runs python, not " + lang)
    code = bytearray()
    while len(code) < n:
        c = os.read(0, min(n - len(code), 1 << 20))
        if not c:
            fail(b"the program was cut short")
        code += c
    with open("/tmp/main.py", "wb") as f:
        f.write(code)
    os.write(1, b"\x06")
    g = sys.modules["__main__"].__dict__
    del g["_codeexec_main"]
    g["__file__"] = "/tmp/main.py"
    g["__cached__"] = None
    sys.argv[:] = ["/tmp/main.py"]
    if "-c" in sys.orig_argv:
        sys.orig_argv[sys.orig_argv.index("-c"):] = ["/tmp/main.py"]
    try:
        exec(compile(bytes(code), "/tmp/main.py", "exec", dont_inherit=True), g)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        e.__traceback__ = tb
        sys.excepthook(type(e), e, tb)
        sys.exit(130 if isinstance(e, KeyboardInterrupt) else 1)
_codeexec_main()
`

// javascriptBootstrap runs the program as the main module with Node's own
// entry point (require.main === module, process.argv[1] === "/tmp/main.js"),
// and removes what node -e adds to the global object and process.execArgv.
const javascriptBootstrap = `(function () {
  'use strict';
  const fs = require('fs');
  const Module = require('module');
  const fail = (m) => { fs.writeSync(2, 'codeexec: ' + m + '\n'); process.exit(125); };
  const wait = new Int32Array(new SharedArrayBuffer(4));
  const read = (buf, off, len) => {
    for (;;) {
      try { return fs.readSync(0, buf, off, len, null); } catch (e) {
        if (e.code !== 'EAGAIN') throw e;
        Atomics.wait(wait, 0, 0, 1);
      }
    }
  };
  fs.writeSync(1, '\x16');
  const one = Buffer.alloc(1);
  let h = '';
  for (;;) {
    if (read(one, 0, 1) === 0) fail('no program received');
    if (one[0] === 10) break;
    h += String.fromCharCode(one[0]);
  }
  const [ns, lang] = h.split(' ');
  const len = Number(ns);
  if (!/^[0-9]+$/.test(ns) || !Number.isSafeInteger(len)) fail('bad program header');
  if (lang !== 'javascript') fail('this container runs javascript, not ' + lang);
  const code = Buffer.alloc(len);
  for (let off = 0; off < len;) {
    const n = read(code, off, len - off);
    if (n === 0) fail('the program was cut short');
    off += n;
  }
  fs.writeFileSync('/tmp/main.js', code);
  fs.writeSync(1, '\x06');
  for (const k of ['module', 'exports', 'require', '__filename', '__dirname']) delete globalThis[k];
  process.argv.splice(1, process.argv.length - 1, '/tmp/main.js');
  process.execArgv.length = 0;
  Module.runMain('/tmp/main.js');
})();
`

// shellBootstrap is the bootstrap of bash: dash reads the header byte by
// byte (its read builtin never reads past the line), GNU head copies exactly
// the code, and bash runs the file. Its arguments are the bash command.
const shellBootstrap = `printf '\026'
IFS=' ' read -r n lang || { echo "codeexec: no program received" >&2; exit 125; }
case "$n" in ''|*[!0-9]*) echo "codeexec: bad program header" >&2; exit 125;; esac
[ "$lang" = bash ] || { echo "codeexec: this container runs bash, not $lang" >&2; exit 125; }
head -c "$n" > /tmp/main.sh || exit 125
printf '\006'
exec "$@" /tmp/main.sh
`

// runCommand is the entrypoint of a run container of lang: the supervisor
// with the language's bootstrap. It is the same for warm and cold containers.
func runCommand(lang string, in sandbox.Interpreter, nonce string) []string {
	spec := sandbox.Languages[lang]
	interp := append([]string{in.Path}, spec.Args...)
	var child []string
	switch lang {
	case "python":
		child = append(interp, "-c", pythonBootstrap)
	case "javascript":
		child = append(interp, "-e", javascriptBootstrap)
	default: // bash, and any shell-like language: the file is the last argument
		child = append([]string{"/bin/sh", "-c", shellBootstrap, "codeexec-bootstrap"}, interp...)
	}
	return append([]string{"/bin/sh", "-c", supervisorScript, "codeexec-supervisor", nonce}, child...)
}

// programHeader is the line that precedes the code on stdin.
func programHeader(lang string, codeLen int) string {
	return fmt.Sprintf("%d %s\n", codeLen, lang)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellQuoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shellQuote(w)
	}
	return strings.Join(q, " ")
}
