// Package runproto is the protocol by which codeexec feeds a run's
// container (docker mode) or pod (kubernetes mode) and reads how it ended:
// the supervisor that is its PID 1, the language bootstraps, what the
// server writes on the attached stdin (the nonce, the program header, the
// code, the files, the program's stdin) and how the output is framed (the
// ready and ack bytes, the trailers, the archive of the working directory).
// Both modes use it unchanged; only how a container is made, attached to
// and waited for differs.
//
// Every run container, warm (pooled) or cold, has the same two processes:
//
//   - PID 1 is a small supervisor (Command, with the options of Supervisor):
//     a python one (SupervisorProgram) when the image has a python3 that
//     can make itself not dumpable, else a POSIX sh one (SupervisorScript).
//     It reads one line from the attached stdin first, the nonce: 128
//     random bits chosen by the server for this container (after the tag
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
//
//     Each mode picks its options. Docker mode's python supervisor starts
//     the egress relay first when the run has egress (Supervisor.Relay).
//     Kubernetes mode's holds (Supervisor.Hold): the server writes the
//     program's length after the nonce (Length), PID 1 hands the child
//     exactly that many bytes of its stdin, and after its trailers it waits
//     for "<nonce> bye" (Bye), which the server writes once it holds both
//     trailers and the archive (Streams.Settled), because containerd's CRI
//     can lose what a container wrote just before it exited. Kubernetes
//     mode also runs shell text first (Supervisor.Before: the ulimits a pod
//     has no field for), which then execs the python supervisor.
//
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
// writes to the same stdout and stderr, and the runtime's default seccomp
// profile lets a process read the memory (/proc/1/mem), environment and
// descriptors (/proc/1/fd) of another dumpable process of its user: a sh
// PID 1's nonce, in its memory, is no secret from the program (the
// containment case sig-forged-end finds it there under runc). The python
// supervisor makes itself not dumpable before it reads the nonce (and the
// fork that feeds the child with Hold inherits that), so that nothing of
// the run can read its memory, environment or descriptors, trace it or
// change its OOM score, and it writes its trailers only when nothing of the
// program is alive: a trailer with its nonce is its own
// (Supervisor.Secret), and docker mode ends the run when the trailers have
// come on both streams (Streams.Trailers); kubernetes mode when the archive
// has come too (Streams.Settled), and it says Bye and deletes the pod
// without waiting for the kubelet to report the container's exit.
// With the shell supervisor, a trailer proves nothing by itself, and the
// run ends when, and only when, three things hold: the attach stream has
// ended (every process of the container is gone: nothing can write after
// that), the container's runtime reports that it exited with status 0 (the
// engine's wait in docker mode, the pod's container status in kubernetes
// mode: PID 1 ran its script to the end: killed from outside or by the OOM
// killer it exits 137, and a program cannot make PID 1 exit while the
// program itself lives on, since every process of the container dies with
// it), and stderr ends with a trailer line (PID 1 writes it last, when
// nothing else is alive). The exit status and the OOM count come from that
// last line. There, a trailer the program forges and follows with more
// output is passed on as the program's output; one it forges and follows
// with nothing (it sleeps) is not the end either: the run goes on to its
// timeout, which counts until the end (the archive of the working directory
// included), and is reported timed out. On stdout the first trailer starts
// the archive; if it does not carry the status of the last stderr trailer,
// the program wrote a copy of it, and the run's artifacts are reported as
// incomplete rather than taken from the program's bytes (Streams.Finished
// and Streams.ArchiveTrusted apply these rules). Waiting for the stream's
// end and the engine's exit costs a fraction of a millisecond on an idle
// machine, and tens of milliseconds when the engine's own processes wait
// for a CPU, which is why docker mode prefers the python supervisor (see
// docs/modes.md, "How a run's end is decided", for the measurements).
//
// A container can therefore be created and started long before a request
// arrives (each mode's warm pool), and a run on it costs one write to the attach
// stream and reading the answer. The ready byte says the interpreter is
// loaded; the ack byte says the program was received, so a container that
// breaks before the ack can be replaced by a cold one without running the
// program twice.
//
// The header only selects an interpreter that the server resolved at start;
// nothing a request contains is ever interpreted by a shell.
package runproto
