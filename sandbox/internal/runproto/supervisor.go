package runproto

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

const (
	// ReadyMarker is the first byte of a bootstrap's stdout: the interpreter
	// is loaded and waits for the program.
	ReadyMarker = 0x16
	// AckMarker is the second byte: the program was received in full and
	// is about to run.
	AckMarker = 0x06
	// TrailerTag starts every nonce, to make a trailer easy to spot by eye.
	TrailerTag = "@@codeexec-end-"
	// maxTrailer bounds the line after the nonce ("<status> <oom kills>\n"):
	// a longer line is not a trailer.
	maxTrailer = 64
	// PackagesCachePath is where a sandbox that mounts the packages cache
	// (docker mode's CODE_EXEC_PACKAGES) shows it to its runs; a header's
	// package entry names a folder below it.
	PackagesCachePath = "/codeexec-packages"
)

// NewNonce returns a fresh trailer nonce: TrailerTag and 128 random bits in
// hex. The server hands it to PID 1 as the first line of its stdin (see
// Input), never in a command line or the environment.
func NewNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return TrailerTag + hex.EncodeToString(b)
}

// SupervisorScript is PID 1 of a run container or pod whose image has no
// python3 (see SupervisorProgram): sh -c SupervisorScript
// codeexec-supervisor <program file name> <hold> <bootstrap command...>,
// with the nonce as the first line of its stdin; a program file name of "-"
// sends no archive (a session's bash call).
//
// The supervisor ignores every signal that can be ignored but SIGCHLD (the
// program may signal its pid 1, and must not end the run that way), so that
// the run always ends with its trailer. The child's stdin is the container's
// stdin (an asynchronous list would get /dev/null otherwise), and env
// --default-signal sets every signal back to its default for the program
// (sh ignores SIGINT and SIGQUIT in asynchronous lists too), so the program
// starts with the dispositions it would have as a foreground command. After
// the child, it kills the rest again until no thread of another process (but
// PID 1's, when it runs in an exec) is alive but a zombie's (dash's read never
// reads past the line, and neither loop starts a process). The number of OOM kills comes from the container's
// own memory cgroup (v2 or v1).
//
// With hold "1" (see Hold), the child reads not the container's stdin but
// a pipe that a relay fills with exactly as many bytes as the line after
// the nonce says (head -c never reads past them), and then closes: the
// child sees the end of its input there, while the container's stdin stays
// open. After its trailers PID 1 then waits, reading and dropping what is
// left of its stdin, for the line "<nonce> bye" (or the end of its stdin)
// before it exits: the server says it once it holds both trailers and the
// archive, so that nothing PID 1 wrote can be in flight when the container
// ends.
const SupervisorScript = `p=$1; h=$2; shift 2
trap '' 1 2 3 4 5 6 7 8 10 11 12 13 14 15 16 20 21 22 23 24 25 26 27 28 29 30 31 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64
IFS= read -r n || exit 125
exec 3<&0
if [ "$h" = 1 ]; then
  { IFS= read -r l || exit 0; case "$l" in ''|*[!0-9]*) exit 0;; esac; head -c "$l"; } <&3 | env --default-signal "$@" 3<&- &
else
  env --default-signal "$@" <&3 3<&- &
fi
wait $!
rc=$?
while :; do
  kill -9 -1 2>/dev/null
  b=
  for t in /proc/[0-9]*/task/[0-9]*; do
    case "$t" in /proc/1/*|/proc/$$/*) continue;; esac
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
[ "$p" = - ] || for f in /tmp/* /tmp/.[!.]* /tmp/..?*; do
  [ "$f" = "/tmp/$p" ] && continue
  if [ -e "$f" ] || [ -L "$f" ]; then a=1; break; fi
done
printf '%s %s %s %s\n' "$n" "$rc" "$o" "$a"
if [ "$a" = 1 ]; then
  tar -C /tmp -c -f - --sort=name --anchored --exclude="./$p" --exclude='./.*/*' . 2>/dev/null
fi
printf '%s %s %s\n' "$n" "$rc" "$o" >&2
if [ "$h" = 1 ]; then
  while IFS= read -r l; do [ "$l" = "$n bye" ] && break; done <&3
fi
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

// SupervisorProgram is PID 1 of a run container or pod whose image has
// python3: python3 -I -S -B -c SupervisorProgram [--hold] [--relay <socket>
// <port> <relay program>] <program file name> <bootstrap command...>, with
// the nonce as the first line of its stdin. It does what SupervisorScript
// does (--hold as its hold "1"), and first makes itself not dumpable, so
// that no process of the run can read its memory, environment or
// descriptors, or trace it, or change its OOM score: the nonce, read into
// its memory, is then a secret of PID 1's (see the package documentation on
// what decides a run's end). The fork that feeds the child its bytes with
// --hold is not dumpable either. With --relay it starts the egress relay
// (docker mode's) before it reads the nonce.
const SupervisorProgram = `import os, signal, sys
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
    def line():
        # One line of stdin, never more.
        b = b""
        while not b.endswith(b"\n"):
            c = os.read(0, 1)
            if not c:
                return None
            b += c
        return b[:-1]
    def spawn(argv, null=(), stdin=None):
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
                if stdin is not None:
                    os.dup2(stdin, 0)
                os.execvp(argv[0], argv)
            finally:
                os._exit(127)
        return pid
    hold = args[0] == "--hold"
    if hold:
        args = args[1:]
    if args[0] == "--relay":
        pid = spawn([sys.executable, "-I", "-S", "-c", args[3], args[1], args[2]], (0, 1, 2))
        if os.waitpid(pid, 0)[1] != 0:
            write(2, b"codeexec: the egress relay did not start; the program has no network\n")
        args = args[4:]
    p, child = args[0], args[1:]
    n = line()
    if n is None:
        os._exit(125)
    stdin = None
    if hold:
        # A fork of PID 1, not dumpable either, hands the child exactly as
        # many bytes of stdin as the line after the nonce says, then closes
        # the pipe: the child sees its input end there.
        stdin, w = os.pipe()
        if os.fork() == 0:
            try:
                os.close(stdin)
                size = line()
                left = int(size) if size and size.isdigit() else 0
                while left > 0:
                    c = os.read(0, min(left, 1 << 16))
                    if not c:
                        break
                    write(w, c)
                    left -= len(c)
            finally:
                os._exit(0)
        os.close(w)
    pid = spawn(child, stdin=stdin)
    if stdin is not None:
        os.close(stdin)
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
                for ev in events:
                    k = ev.split()
                    if k[:1] == [b"oom_kill"]:
                        o = k[1]
            break
        except OSError:
            pass
    a = p != "-" and any(e != p for e in os.listdir("/tmp"))
    write(1, b"%s %d %s %d\n" % (n, rc, o, a))
    if a:
        pid = spawn(["tar", "-C", "/tmp", "-c", "-f", "-", "--sort=name", "--anchored", "--exclude=./" + p, "--exclude=./.*/*", "."], (2,))
        os.waitpid(pid, 0)
    write(2, b"%s %d %s\n" % (n, rc, o))
    if hold:
        bye, rest = n + b" bye", b""
        while True:
            c = os.read(0, 1 << 16)
            if not c:
                break
            lines = (rest + c).split(b"\n")
            rest = lines.pop()
            if bye in lines:
                break
    os._exit(0)
main(sys.argv[1:])
`

// Supervisor says which supervisor is PID 1 of a run container or pod, and
// what it does besides running the bootstrap.
type Supervisor struct {
	// Python is the image's python3 that can make itself not dumpable (the
	// probe's Python3); "" when there is none. With it PID 1 is
	// SupervisorProgram, whose nonce is its own (see Secret); otherwise
	// SupervisorScript.
	Python string
	// Before, if not empty, is shell text that runs first (kubernetes mode's
	// ulimits); it must not read stdin. With Python, a shell runs it and
	// then execs the python supervisor.
	Before string
	// Relay, with Python, makes PID 1 start the egress relay (docker mode's)
	// before it reads the nonce: its arguments as SupervisorProgram takes
	// them after --relay, the socket, the port and the relay program.
	Relay []string
	// Hold makes PID 1 wait for the server's word before it exits (see
	// SupervisorScript): the server then sends the program's length first
	// (Length) and says Bye.
	Hold bool
}

// Secret reports whether PID 1 keeps its nonce out of every process of the
// run (SupervisorProgram), so that a trailer with the nonce is PID 1's.
func (s Supervisor) Secret() bool { return s.Python != "" }

// Command is the entrypoint of a run container or pod of lang: the
// supervisor sup (PID 1) with the language's bootstrap, the same for warm
// and cold ones (the nonce comes on stdin).
func Command(lang string, in sandbox.Interpreter, sup Supervisor) []string {
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
	if sup.Python == "" {
		h := "0"
		if sup.Hold {
			h = "1"
		}
		return append([]string{"/bin/sh", "-c", sup.Before + SupervisorScript, "codeexec-supervisor", spec.FileName, h}, child...)
	}
	var cmd []string
	if sup.Before != "" {
		cmd = []string{"/bin/sh", "-c", sup.Before + `exec "$@"`, "codeexec-supervisor"}
	}
	cmd = append(cmd, sup.Python, "-I", "-S", "-B", "-c", SupervisorProgram)
	if sup.Hold {
		cmd = append(cmd, "--hold")
	}
	if len(sup.Relay) > 0 {
		cmd = append(append(cmd, "--relay"), sup.Relay...)
	}
	return append(append(cmd, spec.FileName), child...)
}

// Length is the line that precedes the program, for a supervisor that
// holds: how many bytes of the container's stdin are the child's.
func Length(n int64) string { return fmt.Sprintf("%d\n", n) }

// Bye is the line that lets a supervisor that holds exit.
func Bye(nonce string) string { return nonce + " bye\n" }

// Header is the line that precedes the code on stdin: "<code length>
// <language> <file count>[ <package entry>]\n".
func Header(lang string, codeLen, files int, packages string) string {
	if packages != "" {
		return fmt.Sprintf("%d %s %d %s\n", codeLen, lang, files, packages)
	}
	return fmt.Sprintf("%d %s %d\n", codeLen, lang, files)
}

// Files is what follows the code on stdin: each file as a line
// "<length> <path>\n" and its bytes. Paths come from artifacts.Decode: clean,
// relative, without a newline.
func Files(files []artifacts.Input) io.Reader {
	rs := make([]io.Reader, 0, 2*len(files))
	for _, f := range files {
		rs = append(rs, strings.NewReader(fileLine(f)), bytes.NewReader(f.Data))
	}
	return io.MultiReader(rs...)
}

// fileLine is the line before a file's bytes.
func fileLine(f artifacts.Input) string { return fmt.Sprintf("%d %s\n", len(f.Data), f.Path) }

// Program is everything a run writes to a bootstrap that waits for its
// program, after the nonce: the header, the code, the files and the
// program's standard input (package names an entry under PackagesCachePath,
// or is empty), and how many bytes that is.
func Program(lang, code string, files []artifacts.Input, stdin, packages string) (io.Reader, int64) {
	header := Header(lang, len(code), len(files), packages)
	n := int64(len(header) + len(code) + len(stdin))
	for _, f := range files {
		n += int64(len(fileLine(f)) + len(f.Data))
	}
	return io.MultiReader(
		strings.NewReader(header),
		strings.NewReader(code),
		Files(files),
		strings.NewReader(stdin),
	), n
}
