package docker

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// How a run container is fed and how it reports back.
//
// Every run container, warm (pooled) or cold, has the same two processes:
//
//   - PID 1 is a small supervisor: a python one (supervisorProgram) when
//     the image has python3, else a POSIX sh one (supervisorScript). It
//     reads one line from the attached stdin first, the nonce: 128 random
//     bits chosen by the server for this container (after the tag
//     "@@codeexec-end-"), written by the server right after the container
//     starts, so that it is never in any process's arguments or
//     environment. Only then does it start the language's bootstrap as its
//     only child. It waits for that child to exit, kills every process the
//     program left behind (kill -9 -1: all of the container but PID 1) and
//     waits until each of them is gone (or a zombie, which holds no file),
//     so that nothing of the program is left to write after it. Then it
//     writes a trailer line, "<nonce> <exit status> <oom kills> <archive
//     follows>\n", on stdout, and "<nonce> <exit status> <oom kills>\n" on
//     stderr, and exits 0, which ends the container. When the working
//     directory (/tmp) holds anything besides the program file (main.<ext>,
//     named on the supervisor's command line), the stdout trailer ends in
//     " 1" instead of " 0" and is followed by a tar stream of it (GNU tar,
//     sorted by name, links stored as links, never followed; the program
//     file and the contents of hidden folders such as .cache left out):
//     that is how the artifacts of a run come back. A plain run, whose /tmp
//     stays empty, costs nothing more than a look at /tmp.
//   - The bootstrap is the interpreter itself, already loaded: python3 and
//     node run a short program that writes one ready byte to stdout, then
//     blocks reading the header "<code length in bytes> <language> <file
//     count>[ <package entry>]\n" (the entry, 32 hex digits, names the
//     folder of installed packages under PackagesCachePath that the program
//     imports from), exactly that many bytes of code, and that many files from
//     the attached stdin (never more: the rest of the stream is the
//     program's standard input). Each file is a line "<length> <path>\n"
//     and its bytes; the path is relative to /tmp, checked by the server
//     (artifacts.Decode: no "..", no newline), and written there with the
//     folders it needs. The bootstrap writes the code to /tmp/main.<ext>
//     (for tracebacks), writes one ack byte to stdout and runs the code as
//     the main program. For bash, dash reads the header, the code and the
//     files and execs bash on the file.
//
// What decides a run's end. The program runs as the same user as PID 1 and
// writes to the same stdout and stderr, and Docker's default seccomp profile
// lets a process read the memory (/proc/1/mem), environment and descriptors
// (/proc/1/fd) of another dumpable process of its user: a sh PID 1's nonce,
// in its memory, is no secret from the program (the containment case
// sig-forged-end finds it there under runc). The python supervisor makes
// itself not dumpable before it reads the nonce, so that nothing of the run
// can read its memory, environment or descriptors, trace it or change its
// OOM score, and it writes its trailers only when nothing of the program is
// alive: a trailer with its nonce is its own, and the run ends when the
// trailers have come on both streams, at once, as before. Without python3
// in the image, a trailer proves nothing by itself, and the run ends when,
// and only when, three things hold: the attach stream has ended (every
// process of the container is gone: nothing can write after that), the
// engine reports that the container exited with status 0 (PID 1 ran its
// script to the end: killed from outside or by the OOM killer it exits 137,
// and a program cannot make PID 1 exit while the program itself lives on,
// since every process of the container dies with it), and stderr ends with a
// trailer line (PID 1 writes it last, when nothing else is alive). The exit
// status and the OOM count come from that last line. There, a trailer the
// program forges and follows with more output is passed on as the program's
// output; one it forges and follows with nothing (it sleeps) is not the end
// either: the run goes on to its timeout, which counts until the end (the
// archive of the working directory included), and is reported timed out. On
// stdout the first trailer starts the archive; if it does not carry the
// status of the last stderr trailer, the program wrote a copy of it, and the
// run's artifacts are reported as incomplete rather than taken from the
// program's bytes. Waiting for the stream's end and the engine's exit costs a
// fraction of a millisecond on an idle machine, and tens of milliseconds when
// the engine's own processes wait for a CPU, which is why the python
// supervisor is preferred (see docs/modes.md, "How a run's end is decided").
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
	// maxTrailer bounds the line after the nonce ("<status> <oom kills>\n"):
	// a longer line is not a trailer.
	maxTrailer = 64
)

// supervisorScript is PID 1 of a run container whose image has no python3:
// sh -c supervisorScript codeexec-supervisor <program file name> <bootstrap
// command...>, with the nonce as the first line of its stdin.
//
// The supervisor ignores every signal that can be ignored but SIGCHLD (the
// program may signal its pid 1, and must not end the run that way), so that
// the run always ends with its trailer. The child's stdin is the container's
// stdin (an asynchronous list would get /dev/null otherwise), and env
// --default-signal sets every signal back to its default for the program
// (sh ignores SIGINT and SIGQUIT in asynchronous lists too), so the program
// starts with the dispositions it would have as a foreground command. After
// the child, it kills the rest again until no thread of another process is
// alive but a zombie's (dash's read never reads past the line, and neither
// loop starts a process). The number of OOM kills comes from the container's
// own memory cgroup (v2 or v1).
const supervisorScript = `p=$1; shift
trap '' 1 2 3 4 5 6 7 8 10 11 12 13 14 15 16 20 21 22 23 24 25 26 27 28 29 30 31 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64
IFS= read -r n || exit 125
exec 3<&0
env --default-signal "$@" <&3 3<&- &
wait $!
rc=$?
while :; do
  kill -9 -1 2>/dev/null
  b=
  for t in /proc/[0-9]*/task/[0-9]*; do
    case "$t" in /proc/1/*) continue;; esac
    s=
    read -r s < "$t/stat" 2>/dev/null || continue
    case "${s##*) }" in Z*|X*|x*|'') ;; *) b=1; break;; esac
  done
  [ -z "$b" ] && break
done
o=-
for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
  if [ -r "$f" ]; then
    o=0
    while read -r k v; do if [ "$k" = oom_kill ]; then o=$v; fi; done < "$f"
    break
  fi
done
a=0
for f in /tmp/* /tmp/.[!.]* /tmp/..?*; do
  [ "$f" = "/tmp/$p" ] && continue
  if [ -e "$f" ] || [ -L "$f" ]; then a=1; break; fi
done
printf '%s %s %s %s\n' "$n" "$rc" "$o" "$a"
if [ "$a" = 1 ]; then
  tar -C /tmp -c -f - --sort=name --anchored --exclude="./$p" --exclude='./.*/*' . 2>/dev/null
fi
printf '%s %s %s\n' "$n" "$rc" "$o" >&2
exit 0
`

// pythonBootstrap runs the program as __main__ in the already-started
// interpreter (sandbox.PythonRunMain): sys.argv, __file__, tracebacks (the
// bootstrap's own frame is left out) and exit statuses are those of python3
// -I -B /tmp/main.py. The package entry the header names (or the folder
// bound for the container, which its environment names) goes on sys.path
// after the standard library, once the bootstrap has imported all it needs;
// the environment names it too, for the program's own python subprocesses.
const pythonBootstrap = sandbox.PythonRunMain + `def _codeexec_main():
    import os
    def fail(msg):
        os.write(2, b"codeexec: " + msg + b"\n")
        os._exit(125)
    def line(what):
        h = b""
        while not h.endswith(b"\n"):
            c = os.read(0, 1)
            if not c:
                fail(what)
            h += c
        return h[:-1]
    def exactly(n, what):
        b = bytearray()
        while len(b) < n:
            c = os.read(0, min(n - len(b), 1 << 20))
            if not c:
                fail(what)
            b += c
        return b
    os.write(1, b"\x16")
    h = line(b"no program received")
    try:
        fields = h.split()
        n, lang, nfiles = int(fields[0]), fields[1], int(fields[2])
    except (ValueError, IndexError):
        fail(b"bad program header")
    if lang != b"python":
        fail(b"this container runs python, not " + lang)
    # A container given its own package folder (not an entry of the cache)
    # names it in its environment.
    p = os.environ.get("` + sandbox.PackagesVariable + `")
    if len(fields) > 3:
        key = fields[3].decode()
        if len(key) != 32 or key.strip("0123456789abcdef"):
            fail(b"bad package entry")
        p = "` + PackagesCachePath + `/" + key
        os.environ["` + sandbox.PackagesVariable + `"] = os.environ["PYTHONPATH"] = p
    code = exactly(n, b"the program was cut short")
    for _ in range(nfiles):
        size, _, path = line(b"the files were cut short").partition(b" ")
        data = exactly(int(size), b"the files were cut short")
        path = b"/tmp/" + path
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        except OSError as e:
            fail(b"could not write " + path + b": " + str(e).encode())
    with open("/tmp/main.py", "wb") as f:
        f.write(code)
    os.write(1, b"\x06")
    _codeexec_run_main("/tmp/main.py", code, p)
_codeexec_main()
`

// javascriptBootstrap runs the program as the main module with Node's own
// entry point (require.main === module, process.argv[1] === "/tmp/main.js"),
// and removes what node -e adds to the global object and process.execArgv.
const javascriptBootstrap = `(function () {
  'use strict';
  const fs = require('fs');
  const path = require('path');
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
  const one = Buffer.alloc(1);
  const line = (what) => {
    const bytes = [];
    for (;;) {
      if (read(one, 0, 1) === 0) fail(what);
      if (one[0] === 10) return Buffer.from(bytes).toString('utf8');
      bytes.push(one[0]);
    }
  };
  const exactly = (len, what) => {
    const b = Buffer.alloc(len);
    for (let off = 0; off < len;) {
      const n = read(b, off, len - off);
      if (n === 0) fail(what);
      off += n;
    }
    return b;
  };
  const count = (s) => (/^[0-9]+$/.test(s) && Number.isSafeInteger(Number(s)) ? Number(s) : -1);
  fs.writeSync(1, '\x16');
  const [ns, lang, nfs, key] = line('no program received').split(' ');
  const len = count(ns), nfiles = count(nfs);
  if (len < 0 || nfiles < 0) fail('bad program header');
  if (lang !== 'javascript') fail('this container runs javascript, not ' + lang);
  if (key !== undefined) {
    if (!/^[0-9a-f]{32}$/.test(key)) fail('bad package entry');
    const p = '` + PackagesCachePath + `/' + key;
    process.env.` + sandbox.PackagesVariable + ` = p;
    process.env.NODE_PATH = p + '/node_modules';
    Module._initPaths();
  }
  const code = exactly(len, 'the program was cut short');
  for (let i = 0; i < nfiles; i++) {
    const h = line('the files were cut short');
    const sp = h.indexOf(' ');
    const size = count(h.slice(0, sp));
    if (sp < 0 || size < 0) fail('bad file header');
    const data = exactly(size, 'the files were cut short');
    const file = '/tmp/' + h.slice(sp + 1);
    try {
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, data);
    } catch (e) { fail('could not write ' + file + ': ' + e.message); }
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
// the code and each file, and bash runs the file. Its arguments are the
// bash command.
const shellBootstrap = `printf '\026'
IFS=' ' read -r n lang nf || { echo "codeexec: no program received" >&2; exit 125; }
case "$n" in ''|*[!0-9]*) echo "codeexec: bad program header" >&2; exit 125;; esac
case "$nf" in ''|*[!0-9]*) echo "codeexec: bad program header" >&2; exit 125;; esac
[ "$lang" = bash ] || { echo "codeexec: this container runs bash, not $lang" >&2; exit 125; }
head -c "$n" > /tmp/main.sh || exit 125
i=0
while [ "$i" -lt "$nf" ]; do
  IFS= read -r h || { echo "codeexec: the files were cut short" >&2; exit 125; }
  size=${h%% *}; f=/tmp/${h#* }
  case "$size" in ''|*[!0-9]*) echo "codeexec: bad file header" >&2; exit 125;; esac
  case "${h#* }" in */*) mkdir -p "${f%/*}" || exit 125;; esac
  head -c "$size" > "$f" || exit 125
  i=$((i+1))
done
printf '\006'
exec "$@" /tmp/main.sh
`

// supervisorProgram is PID 1 of a run container whose image has python3:
// python3 -I -S -B -c supervisorProgram [--relay <socket> <port> <relay
// program>] <program file name> <bootstrap command...>, with the nonce as the
// first line of its stdin. It does what supervisorScript does, and first
// makes itself not dumpable, so that no process of the run can read its
// memory, environment or descriptors, or trace it, or change its OOM score:
// the nonce, read into its memory, is then a secret of PID 1's (see
// bootstrap.go's comment on what decides a run's end). With --relay it
// starts the egress relay before it reads the nonce.
const supervisorProgram = `import os, signal, sys
def main(args):
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    sigs = sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})
    for s in sigs:
        if s != signal.SIGCHLD:
            signal.signal(s, signal.SIG_IGN)
    def write(fd, b):
        while b:
            b = b[os.write(fd, b):]
    def spawn(argv, null=()):
        # fork and exec, not posix_spawn: glibc's leaves its own signals
        # (32, 33) ignored in the child. Every signal is at its default for
        # the child, none blocked.
        pid = os.fork()
        if pid == 0:
            try:
                for s in sigs:
                    signal.signal(s, signal.SIG_DFL)
                if null:
                    fd = os.open(os.devnull, os.O_RDWR)
                    for i in null:
                        os.dup2(fd, i)
                os.execvp(argv[0], argv)
            finally:
                os._exit(127)
        return pid
    if args[0] == "--relay":
        pid = spawn([sys.executable, "-I", "-S", "-c", args[3], args[1], args[2]], (0, 1, 2))
        if os.waitpid(pid, 0)[1] != 0:
            write(2, b"codeexec: the egress relay did not start; the program has no network\n")
        args = args[4:]
    p, child = args[0], args[1:]
    n = b""
    while not n.endswith(b"\n"):
        c = os.read(0, 1)
        if not c:
            os._exit(125)
        n += c
    n = n[:-1]
    pid = spawn(child)
    st = os.waitpid(pid, 0)[1]
    rc = os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        busy = False
        for d in os.listdir("/proc"):
            if not d.isdigit() or d == "1":
                continue
            try:
                tasks = os.listdir("/proc/%s/task" % d)
            except OSError:
                continue
            for t in tasks:
                try:
                    with open("/proc/%s/task/%s/stat" % (d, t), "rb") as f:
                        s = f.read()
                except OSError:
                    continue
                if s[s.rfind(b")") + 2:][:1] not in b"ZXx":
                    busy = True
            if busy:
                break
        if not busy:
            break
    o = b"-"
    for f in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(f, "rb") as events:
                o = b"0"
                for line in events:
                    k = line.split()
                    if k[:1] == [b"oom_kill"]:
                        o = k[1]
            break
        except OSError:
            pass
    a = any(e != p for e in os.listdir("/tmp"))
    write(1, b"%s %d %s %d\n" % (n, rc, o, a))
    if a:
        pid = spawn(["tar", "-C", "/tmp", "-c", "-f", "-", "--sort=name", "--anchored", "--exclude=./" + p, "--exclude=./.*/*", "."], (2,))
        os.waitpid(pid, 0)
    write(2, b"%s %d %s\n" % (n, rc, o))
    os._exit(0)
main(sys.argv[1:])
`

// runCommand is the entrypoint of a run container of lang: the supervisor
// with the language's bootstrap, supervisorProgram run by python (the
// image's python3) when there is one, else supervisorScript. It is the same
// for warm and cold containers (the nonce comes on stdin). relay, with
// python, makes the supervisor start the egress relay first.
func runCommand(lang string, in sandbox.Interpreter, python string, relay bool) []string {
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
	if python == "" {
		return append([]string{"/bin/sh", "-c", supervisorScript, "codeexec-supervisor", spec.FileName}, child...)
	}
	cmd := []string{python, "-I", "-S", "-B", "-c", supervisorProgram}
	if relay {
		cmd = append(cmd, "--relay", egressMount+"/"+egressSocket, strconv.Itoa(egressPort), relayProgram)
	}
	return append(append(cmd, spec.FileName), child...)
}

// programHeader is the line that precedes the code on stdin.
func programHeader(lang string, codeLen, files int, packages string) string {
	if packages != "" {
		return fmt.Sprintf("%d %s %d %s\n", codeLen, lang, files, packages)
	}
	return fmt.Sprintf("%d %s %d\n", codeLen, lang, files)
}

// fileRecords is what follows the code on stdin: each file as a line
// "<length> <path>\n" and its bytes. Paths come from artifacts.Decode: clean,
// relative, without a newline.
func fileRecords(files []artifacts.Input) io.Reader {
	rs := make([]io.Reader, 0, 2*len(files))
	for _, f := range files {
		rs = append(rs, strings.NewReader(fmt.Sprintf("%d %s\n", len(f.Data), f.Path)), bytes.NewReader(f.Data))
	}
	return io.MultiReader(rs...)
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
