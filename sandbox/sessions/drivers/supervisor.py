# codeexec session supervisor: the one process of a session that never runs
# the session's code. See sandbox/sessions (protocol.go) for the protocol and
# what it guarantees. argv: <language> <control in> <control out> [--relay
# <socket> <port> <relay program>] -- <interpreter...>; each control end is a
# path (a FIFO, unlinked once open) or fd:N, or both are listen:NAME (the
# control channel is then each connection accepted, one at a time, on the
# abstract unix socket NAME; see "Listening" below). For python the interpreter is
# the python driver's source, which runs in a fork of this process; for
# javascript, the command line of node with the javascript driver; for bash,
# bash's.
import os, sys


def _codeexec_supervisor(argv):
    # Imported here, not taken from the module's globals: a python
    # session's generations clear __main__ before the driver runs in it.
    import builtins, ctypes, fcntl, os, resource, selectors, signal, socket, struct, sys, tarfile, tempfile, time

    lang, cin_spec, cout_spec, rest = argv[0], argv[1], argv[2], argv[3:]
    relay = None
    if rest[:1] == ["--relay"]:
        relay, rest = (rest[1], int(rest[2]), rest[3]), rest[4:]
    if rest[:1] != ["--"] or len(rest) < 2:
        raise SystemExit("codeexec supervisor: bad arguments")
    interp = rest[1:]

    MAX = 4091  # a frame is one write of at most PIPE_BUF bytes
    START_LIMIT = 55  # seconds an interpreter may take to start (docker and kubernetes mode wait 60)
    me = os.getpid()
    pid1 = me == 1
    libc = ctypes.CDLL(None, use_errno=True)
    # No process of the session may read this one's memory or descriptors
    # or trace it; the orphans of its descendants become its children.
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    catchable = sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})
    for s in catchable:
        if s != signal.SIGCHLD:
            try:
                signal.signal(s, signal.SIG_IGN)
            except (OSError, ValueError):
                pass

    def ctl(spec, flags):
        if spec.startswith("fd:"):
            return int(spec[3:])
        fd = os.open(spec, flags)
        try:
            os.unlink(spec)
        except OSError:
            pass
        return fd

    # Listening (kubernetes mode, where each call reaches the pod over an
    # exec of its own): the name is bound now, before anything of the
    # session runs, and held for the session's life, so that no process of
    # the session can take it; a connection is served only while no call
    # runs, and only when it comes from a process started from outside the
    # pod (see accept).
    ctl_listener = None
    if cin_spec.startswith("listen:"):
        ctl_listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ctl_listener.bind("\0" + cin_spec[len("listen:"):])
        ctl_listener.listen(16)
        ctl_listener.setblocking(False)
        cin = cout = -1
    else:
        cin = ctl(cin_spec, os.O_RDONLY)
        cout = ctl(cout_spec, os.O_WRONLY)
    conn = None  # the connection served (listening), its client's pid
    conn_pid = 0
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (cin, cout, null):
        if fd >= 0:
            os.set_inheritable(fd, False)
    if not pid1:
        os.dup2(null, 0)
        os.dup2(null, 1)

    def framer(fd, lock=None):
        # A function that writes frames on fd: one write each, of at most
        # PIPE_BUF bytes, so that a frame is never torn. The python driver
        # takes one too (with a lock: its threads write frames).
        def frame(kind, data=b""):
            i = 0
            while True:
                chunk = data[i:i + MAX]
                b = kind + struct.pack(">I", len(chunk)) + chunk
                if lock:
                    lock.acquire()
                try:
                    while b:
                        b = b[os.write(fd, b):]
                finally:
                    if lock:
                        lock.release()
                i += MAX
                if i >= len(data):
                    return
        return frame

    def send(kind, data=b""):
        # Listening, with no connection (or one whose client went away: its
        # end shows on the read side too), the frame is dropped.
        if cout < 0:
            return
        try:
            framer(cout)(kind, data)
        except OSError:
            if ctl_listener is None:
                raise

    def fail(msg):
        send(b"F", msg.encode(errors="replace"))
        os._exit(125)

    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    if cin >= 0:
        os.set_blocking(cin, False)
    sel = selectors.DefaultSelector()

    # Where the kernel shows what a thread waits in (/proc/PID/syscall; gVisor
    # has no such file), a call ends only once the interpreter waits for the
    # next one. Whether it does is seen on the first interpreter (this
    # process, not dumpable, cannot read its own).
    read_nr = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine)
    can_look = None

    def stat(pid, task=""):
        try:
            with open("/proc/%d%s/stat" % (pid, task), "rb") as f:
                s = f.read()
        except OSError:
            return None
        f = s[s.rfind(b")") + 2:].split()
        return f[0].decode(), int(f[1])  # state, parent

    def alive(pid):
        # A process whose first thread alone has ended (exit(2), the system
        # call) runs on in its other threads while its stat says Z.
        st = stat(pid)
        if st is None:
            return False
        if st[0] not in "ZXx":
            return True
        try:
            tasks = os.listdir("/proc/%d/task" % pid)
        except OSError:
            return False
        for t in tasks:
            if t != str(pid):
                st = stat(pid, "/task/" + t)
                if st is not None and st[0] not in "ZXx":
                    return True
        return False

    exited = {}

    def reap():
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exited[pid] = status

    def children_of(pid):
        # The children of pid's threads, as the kernel lists them; None
        # where it does not.
        out = []
        try:
            for t in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                    out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            return out if os.path.exists("/proc/%d/task" % me) else None
        except OSError:
            return None
        return out

    def others(keep):
        # Every live process this supervisor answers for, but itself and
        # keep: its PID namespace when it is its init (docker mode), its
        # descendants otherwise (found from its children down, or, where the
        # kernel does not list children, from every process's parent).
        mine = set()
        if pid1:
            mine = {int(n) for n in os.listdir("/proc") if n.isdigit()}
        else:
            todo = [me]
            while todo:
                c = children_of(todo.pop())
                if c is None:
                    mine = None
                    break
                todo += [p for p in c if p not in mine]
                mine.update(c)
            if mine is None:
                procs = {}
                for n in os.listdir("/proc"):
                    if n.isdigit():
                        st = stat(int(n))
                        if st is not None:
                            procs[int(n)] = st[1]
                mine, todo = set(), [me]
                while todo:
                    parent = todo.pop()
                    for p, pp in procs.items():
                        if pp == parent and p not in mine:
                            mine.add(p)
                            todo.append(p)
        out = [p for p in mine if p != me and p not in keep and alive(p)]
        # A process started from outside (the connection's client) is
        # spared only while it still is one, looked at after the list above
        # was made: once it has ended, its pid may be a process of the
        # session's, which is not spared.
        if conn_pid and conn_pid in keep and not from_outside(conn_pid):
            return others(tuple(p for p in keep if p != conn_pid))
        return out, mine

    def sweep(keep=()):
        # Stopped first, so that nothing forks while it is killed. Done
        # once a look finds nothing alive and sees the same processes as
        # the look before it: a process that ends while it is looked at
        # hands its children to this subreaper meanwhile, and the look can
        # read this process's children before they come and the ending
        # one's after they left; the next look finds them here.
        seen = None
        for _ in range(10000):
            reap()
            victims, mine = others(keep)
            if not victims:
                if mine == seen:
                    return
                seen = mine
                continue
            seen = None
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for p in victims:
                    try:
                        os.kill(p, sig)
                    except OSError:
                        pass
        fail("the session's processes could not all be killed")

    def stop(pid):
        os.kill(pid, signal.SIGSTOP)
        while True:
            st = stat(pid)
            if st is None or st[0] in "TtZXx":
                return
            time.sleep(0.0002)

    def fork():
        # A fork that finds no process slot free (EAGAIN: the pids limit or
        # RLIMIT_NPROC, still held by the processes that a call's end has
        # just killed: under gVisor they take a while to go) is tried again,
        # reaping meanwhile, for up to 10 s; then the session fails as lost.
        delay, give_up = 0.001, time.monotonic() + 10
        while True:
            try:
                return os.fork()
            except BlockingIOError as e:
                if time.monotonic() >= give_up:
                    fail("a process of the session could not be started: %s%s" % (e.strerror, nproc_reached()))
                reap()
                time.sleep(delay)
                delay = min(2 * delay, 0.1)

    def spawn(argv, fds):
        # fork and exec, not posix_spawn: glibc's leaves its own signals
        # (32, 33) ignored in the child. fds maps the child's descriptors to
        # ours; every signal is at its default for it, none blocked.
        pid = fork()
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                for s in catchable:
                    signal.signal(s, signal.SIG_DFL)
                # Out of the way first, so that no target is a source.
                high = {t: fcntl.fcntl(f, fcntl.F_DUPFD_CLOEXEC, 100) for t, f in fds.items()}
                for t, f in high.items():
                    os.dup2(f, t)
                os.execv(argv[0], argv)
            finally:
                os._exit(127)
        return pid

    def waits_for_call(pid, fd):
        if not can_look:
            return True
        try:
            if lang == "python" and len(os.listdir("/proc/%d/task" % pid)) != 1:
                return False
            with open("/proc/%d/syscall" % pid) as f:
                s = f.read().split()
        except OSError:
            return False
        return len(s) > 1 and s[0] == read_nr and int(s[1], 16) == fd

    # The egress relay (docker mode): a listener on the loopback whose
    # connections go to the egress proxy's unix socket. The relay's program
    # runs in a fork of this process (which no code of the session can read
    # or trace either), started before each call and killed at its end with
    # the call's other processes (keep does not spare it), after which what
    # is queued on the listener is closed (drop_queued): what a call made
    # reaches the proxy before the server hears of its end, or never.
    listener = None
    if relay is not None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", relay[1]))
        listener.listen(128)
    relay_pid = 0

    def start_relay():
        nonlocal relay_pid
        if listener is None or (relay_pid and alive(relay_pid)):
            return
        pid = fork()
        if pid == 0:
            try:
                for fd in (cin, cout, wake_r, wake_w):
                    if fd > 2:
                        os.close(fd)
                if ctl_listener is not None:
                    ctl_listener.close()
                sys.argv[:] = ["", relay[0], str(relay[1]), str(listener.fileno())]
                exec(compile(relay[2], "<codeexec-relay>", "exec"), {"__name__": "__main__"})
            finally:
                os._exit(0)
        relay_pid = pid

    def drop_queued():
        # Once the relay is gone (the code may have stopped it, with
        # connections of the call's waiting on the listener), every
        # connection still queued on the listener is closed, unread.
        if listener is None:
            return
        # Not blocking while it is emptied; blocking again for the next
        # relay, which shares it.
        listener.setblocking(False)
        try:
            while True:
                try:
                    c, _ = listener.accept()
                except InterruptedError:
                    continue
                except OSError:
                    break  # BlockingIOError: the queue is empty
                c.close()
        finally:
            listener.setblocking(True)

    # The egress relay of kubernetes mode: a process that the server execs
    # into the pod before each call, while nothing of the session runs
    # (sandbox/kube), and names with "relay <pid>" once it listens. It is
    # killed at the call's end with the call's other processes (keep does not
    # spare it), and its listener with it: a connection that the call left
    # queued there, the relay stopped, is reset, not served by a later call.
    # "relay 0" ends the one named, before the server starts another.
    exec_relay = 0

    def from_outside(pid):
        # Whether pid is a live process started by an exec into the pod: its
        # parent is outside the pod's PID namespace. No process of the
        # session is one (every one descends from this process).
        st = stat(pid)
        return st is not None and st[0] not in "ZXx" and st[1] == 0

    def set_relay(pid):
        nonlocal exec_relay
        old, exec_relay = exec_relay, 0
        if old and old != pid and old != conn_pid and from_outside(old):
            try:
                os.kill(old, signal.SIGKILL)
            except OSError:
                pass
            end = time.monotonic() + 10
            while alive(old) and time.monotonic() < end:
                time.sleep(0.001)
        if pid == 0:
            send(b"K", b"ok")
        elif not from_outside(pid):
            send(b"K", b"gone")
        else:
            exec_relay = pid
            send(b"K", b"ok")

    def keep(*pids):
        # The client of the connection served (listening) lives on; the
        # egress relay, docker mode's or kubernetes mode's, ends with the
        # call.
        return tuple(p for p in pids + (conn_pid,) if p)

    # The interpreter: python, a fork of this process (each call's end
    # forks it again); javascript, node. Its control input and frames are
    # pipes of its own, never the server's channel.
    st8 = {"pid": 0, "to": -1, "frm": -1, "fd": -1, "buf": b"", "out": b"", "version": ""}

    def close_fd(fd):
        if fd >= 0:
            try:
                sel.unregister(fd)
            except (KeyError, ValueError):
                pass
            os.close(fd)

    def start_interp(attempt=1):
        nonlocal can_look
        close_fd(st8["to"])
        close_fd(st8["frm"])
        st8.update(to=-1, frm=-1, buf=b"", out=b"", pid=0)
        if lang == "bash":
            st8["version"] = "bash"
            return
        r1, w1 = os.pipe()  # supervisor -> interpreter
        r2, w2 = os.pipe()  # interpreter -> supervisor
        if lang == "python":
            pid = fork()
            if pid == 0:
                become_python(r1, w2)
            fd = r1
        else:
            pid = spawn(interp, {0: null, 1: null, 3: r1, 4: w2})
            fd = 3
        os.close(r1)
        os.close(w2)
        os.set_blocking(w1, False)
        os.set_blocking(r2, False)
        st8.update(pid=pid, to=w1, frm=r2, fd=fd)
        # Its first frame says it is loaded: "<pid> <interpreter> <version>".
        # node that the process limit refuses one of its threads as it
        # starts waits for that thread forever: it is given up once the
        # limit is seen reached (python's start is one fork, whose failure
        # fork reports), or at the latest after START_LIMIT seconds
        # (within docker and kubernetes mode's bound on a session's start),
        # with the reason.
        began = time.monotonic()
        while True:
            frames, ended = read_frames()
            r = [p for k, p in frames if k == b"R"]
            if r:
                st8["version"] = r[0].split(b" ", 1)[-1].decode(errors="replace")
                break
            if ended or not alive(pid):
                reap()
                if ctl_listener is not None and attempt < 3:
                    # Listening (kubernetes mode), a kill -9 -1 of the
                    # server's (over pods/exec, once a call's connection
                    # ended) may land as the interpreter starts after
                    # the drop: it is started again.
                    return start_interp(attempt + 1)
                fail("the %s interpreter ended as it started%s" % (lang, nproc_reached()))
            waited = time.monotonic() - began
            why = nproc_reached() if waited >= 2 and lang == "javascript" else ""
            if why or waited >= START_LIMIT:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                fail("the %s interpreter did not start%s" % (lang, why or " within %d s" % START_LIMIT))
            s = selectors.DefaultSelector()
            s.register(r2, selectors.EVENT_READ)
            s.select(1.0)
            s.close()
        if can_look is None:
            try:
                with open("/proc/%d/syscall" % pid) as f:
                    f.read()
                can_look = read_nr is not None
            except OSError:
                can_look = False
        stop(pid)
        sel.register(r2, selectors.EVENT_READ, "interp")

    def nproc_reached():
        # ": the process limit is reached ...", when the threads of this
        # process's user that it can see are as many as its RLIMIT_NPROC
        # allows, but one; "" otherwise. Where the session's processes share their
        # host user with others (process mode without a user namespace or a
        # user of its own), those count too.
        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        if soft == resource.RLIM_INFINITY:
            return ""
        uid, n = os.getuid(), 0
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/status" % p) as f:
                    for line in f:
                        if line.startswith("Uid:") and int(line.split()[1]) != uid:
                            break
                        if line.startswith("Threads:"):
                            n += int(line.split()[1])
                            break
            except (OSError, ValueError, IndexError):
                continue
        if n + 1 < soft:
            return ""
        return ": the process limit is reached (user %d has %d threads; RLIMIT_NPROC allows %d)" % (uid, n, soft)

    def become_python(r, w):
        # A generation of a python session starts as a fork of this process,
        # with the signals and dumpability of an ordinary one; the driver
        # runs in a fresh __main__.
        try:
            os.dup2(null, 0)
            os.dup2(null, 1)
            for name in os.listdir("/proc/self/fd"):
                fd = int(name)
                if fd > 2 and fd not in (r, w):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            signal.set_wakeup_fd(-1)
            for s in catchable:
                try:
                    signal.signal(s, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)
            libc.prctl(4, 1, 0, 0, 0)
            g = sys.modules["__main__"].__dict__
            g.clear()
            g.update(__name__="__main__", __builtins__=builtins, _codeexec_framer=framer)
            sys.argv[:] = ["", "fd:%d" % r, "fd:%d" % w]
            exec(compile(interp[0], "<codeexec-driver>", "exec"), g)
        finally:
            os._exit(125)

    def read_frames():
        # The frames the interpreter wrote, and whether it closed its end.
        # At most 16 reads a time: an interpreter that writes as fast as
        # this process reads (a call printing in a loop) must not keep it
        # from its control channel, where the call's reset comes from (as
        # reading until the pipe was empty could, while the unparsed bytes
        # grew without bound: a session in CI never answered its reset).
        ended = False
        chunks = [st8["buf"]]
        for _ in range(16):
            try:
                d = os.read(st8["frm"], 65536)
            except BlockingIOError:
                break
            if not d:
                ended = True
                break
            chunks.append(d)
        out, b = [], b"".join(chunks)
        while len(b) >= 5:
            n = struct.unpack(">I", b[1:5])[0]
            if n > MAX:
                return out, True  # no driver sends that
            if len(b) < 5 + n:
                break
            out.append((b[:1], b[5:5 + n]))
            b = b[5 + n:]
        st8["buf"] = b
        return out, ended

    # Files in and changes out, in the working directory, between calls
    # (nothing of the session runs then), never through a link.
    since = None  # the ctime before which a file was reported already

    def open_dir(d, name):
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=d)

    def place(path):
        # An open descriptor of path, made anew, or why it cannot be.
        parts = path.split("/")
        d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i, c in enumerate(parts[:-1]):
                try:
                    # Not through a link (O_NOFOLLOW alone is not enough
                    # on every kernel: gVisor's follows one to a folder).
                    if os.stat(c, dir_fd=d, follow_symlinks=False).st_mode & 0o170000 != 0o040000:
                        return "folder " + "/".join(parts[:i + 1])
                    n = open_dir(d, c)
                except FileNotFoundError:
                    try:
                        os.mkdir(c, 0o777, dir_fd=d)
                        n = open_dir(d, c)
                    except OSError:
                        return "cannot the folder %s could not be made" % "/".join(parts[:i + 1])
                except OSError:
                    return "folder " + "/".join(parts[:i + 1])
                os.close(d)
                d = n
            try:
                if os.stat(parts[-1], dir_fd=d, follow_symlinks=False).st_mode & 0o170000 == 0o040000:
                    return "dir"
                os.unlink(parts[-1], dir_fd=d)
            except FileNotFoundError:
                pass
            except OSError:
                return "cannot it could not be written there"
            try:
                return os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=d)
            except OSError:
                return "cannot it could not be written there"
        finally:
            os.close(d)

    def write_files(count):
        # Records "<length> <path>\n<bytes>"; the first refusal is the
        # answer, and the records after it are read and dropped.
        answer = "ok"
        for i in range(count):
            size, _, path = need_line().partition(b" ")
            body = need(int(size))
            if answer != "ok":
                continue
            r = place(path.decode("utf-8", "surrogateescape"))
            if isinstance(r, str):
                answer = "refused %d %s" % (i, r)
                continue
            try:
                v = memoryview(body)
                while v:
                    v = v[os.write(r, v):]
            except OSError:
                answer = "refused %d cannot it could not be written there" % i
            finally:
                os.close(r)
        send(b"K", answer.encode("utf-8", "surrogateescape"))

    class Frames:
        def write(self, b):
            b = bytes(b)
            for i in range(0, len(b), MAX):
                send(b"T", b[i:i + MAX])
            return len(b)

    def changes():
        # Every file (not folder) of the working directory whose status
        # changed since the last look (all of them the first time), as a tar
        # stream in T frames, then a t frame; hidden folders and __pycache__
        # are not looked into.
        nonlocal since
        now, found = time.time(), []

        def walk(rel, d):
            try:
                names = sorted(os.listdir(d))
            except OSError:
                return
            for n in names:
                p = rel + n
                try:
                    st = os.stat(n, dir_fd=d, follow_symlinks=False)
                except OSError:
                    continue
                if st.st_mode & 0o170000 != 0o040000:
                    if since is None or st.st_ctime >= since:
                        found.append(p)
                elif not n.startswith(".") and n != "__pycache__":
                    try:
                        sub = open_dir(d, n)
                    except OSError:
                        continue
                    try:
                        walk(p + "/", sub)
                    finally:
                        os.close(sub)

        top = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            walk("", top)
        finally:
            os.close(top)
        since = now - 1.0  # file times tick coarsely
        err = b""
        if found:
            try:
                with tarfile.open(fileobj=Frames(), mode="w|", format=tarfile.GNU_FORMAT) as tar:
                    for p in found:
                        try:
                            info = tar.gettarinfo(p, arcname=p)
                            if info is None:
                                continue  # a socket
                            if not info.isreg():
                                tar.addfile(info)
                                continue
                            with os.fdopen(os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as f:
                                tar.addfile(info, f)
                        except OSError:
                            continue
            except Exception as e:
                err = str(e).encode(errors="replace")
        send(b"t", err)

    # Calls. A call is over once its end is real (try_end); then the
    # interpreter is stopped and every other process of the session killed,
    # before the server hears of it (X).
    call = None

    def start_call(code, stdin):
        nonlocal call
        start_relay()
        call = {"rc": None, "lost": False, "signal": "", "said": False, "next": 0, "bash": None, "token": b""}
        if lang != "bash":
            header = b"%d %d" % (len(code), len(stdin))
            if lang == "javascript":
                # The driver's end frame must carry it: a timer, a worker or
                # another process that writes into its control output by the
                # descriptor's number does not know it.
                call["token"] = os.urandom(16).hex().encode()
                header += b" " + call["token"]
            st8["out"] = header + b"\n" + code + stdin
            os.kill(st8["pid"], signal.SIGCONT)
            to_interp()
            return
        d = call_dir()
        f = os.path.join(d, "call.sh")
        with open(f, "wb") as w:
            w.write(code)
        ro, wo = os.pipe()
        re_, we = os.pipe()
        ri, wi = os.pipe()
        pid = spawn(interp + [f], {0: ri, 1: wo, 2: we})
        for fd in (ri, wo, we):
            os.close(fd)
        for fd in (ro, re_, wi):
            os.set_blocking(fd, False)
        sel.register(ro, selectors.EVENT_READ, b"O")
        sel.register(re_, selectors.EVENT_READ, b"E")
        call["bash"] = {"pid": pid, b"O": ro, b"E": re_, "in": wi, "stdin": memoryview(stdin), "dir": d}
        if stdin:
            sel.register(wi, selectors.EVENT_WRITE, "stdin")
        else:
            os.close(wi)
            call["bash"]["in"] = -1

    def call_dir():
        # A private folder for a bash call's program, outside the working
        # directory: the control channel's folder (which the sandbox lets
        # the session write), or /dev/shm, or the temporary folder.
        places = [os.path.dirname(cin_spec)] if not cin_spec.startswith(("fd:", "listen:")) else []
        for place in places + ["/dev/shm", None]:
            try:
                return tempfile.mkdtemp(prefix="codeexec-call-", dir=place)
            except OSError:
                continue
        return tempfile.mkdtemp(prefix="codeexec-call-")

    def to_interp():
        try:
            sel.unregister(st8["to"])
        except (KeyError, ValueError):
            pass
        while st8["out"]:
            try:
                st8["out"] = st8["out"][os.write(st8["to"], st8["out"]):]
            except BlockingIOError:
                sel.register(st8["to"], selectors.EVENT_WRITE, "to")
                return
            except OSError:
                st8["out"] = b""

    def finish():
        nonlocal call
        c, call = call, None
        drop_queued()
        words = [str(c["rc"] if c["rc"] is not None else -1)]
        if c["lost"]:
            words.append("lost")
        if c["signal"]:
            words.append("signal:" + c["signal"])
        if pid1:
            # The container's own memory cgroup (v2, or v1) counts its OOM
            # kills.
            for f in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
                try:
                    with open(f) as events:
                        n = [l.split()[1] for l in events if l.startswith("oom_kill ")]
                except OSError:
                    continue
                words.append("oom:" + (n[0] if n else "0"))
                break
        send(b"X", " ".join(words).encode())

    def ended_with(c, status):
        if os.WIFSIGNALED(status):
            n = os.WTERMSIG(status)
            c["rc"] = 128 + n
            c["signal"] = "killed" if n == signal.SIGKILL else signal.Signals(n).name[3:].lower()
        else:
            c["rc"] = os.WEXITSTATUS(status)

    def bash_out(kind):
        b = call["bash"]
        try:
            d = os.read(b[kind], 65536)
        except BlockingIOError:
            return
        except OSError:
            d = b""
        if d:
            send(kind, d)
            return
        close_fd(b[kind])
        b[kind] = -1

    def bash_stdin():
        b = call["bash"]
        try:
            b["stdin"] = b["stdin"][os.write(b["in"], b["stdin"]):]
        except BlockingIOError:
            return
        except OSError:
            b["stdin"] = b["stdin"][:0]
        if not b["stdin"]:
            close_fd(b["in"])
            b["in"] = -1

    def bash_done(b):
        close_fd(b["in"])
        for kind in (b"O", b"E"):
            close_fd(b[kind])
        try:
            os.unlink(os.path.join(b["dir"], "call.sh"))
            os.rmdir(b["dir"])
        except OSError:
            pass

    def bash_ended(status):
        # bash ended: what it left is killed, then its output read to the end.
        b = call["bash"]
        ended_with(call, status)
        sweep(keep())
        for kind in (b"O", b"E"):
            if b[kind] < 0:
                continue
            os.set_blocking(b[kind], True)
            while True:
                try:
                    d = os.read(b[kind], 65536)
                except OSError:
                    d = b""
                if not d:
                    break
                send(kind, d)
        bash_done(b)
        finish()

    def interp_frames():
        frames, ended = read_frames()
        if ended:
            try:
                sel.unregister(st8["frm"])
            except (KeyError, ValueError):
                pass
            try:
                os.kill(st8["pid"], signal.SIGKILL)  # it broke the protocol, or ended
            except OSError:
                pass
        c = call
        for kind, payload in frames:
            if c is None:
                continue  # nothing of the session runs between calls
            if c["next"]:
                continue  # python: after the next generation's announcement
            if kind in (b"O", b"E"):
                send(kind, payload)
            elif kind == b"X":
                # The last one counts: the driver says it once the call's
                # code is done, after anything the code wrote itself.
                f = payload.split()
                if c["token"] and f[1:] != [c["token"]]:
                    continue
                try:
                    c["rc"] = int(f[0]) & 0xFF
                except (ValueError, IndexError):
                    c["rc"] = 1
                c["said"] = True
            elif kind == b"R" and c["said"] and lang == "python":
                # The next generation announces itself: a child of the one
                # that ran the call (or of this process, once that ended).
                try:
                    pid = int(payload.split(b" ", 1)[0])
                except ValueError:
                    continue
                st = stat(pid)
                if pid != st8["pid"] and st is not None and st[1] in (st8["pid"], me):
                    c["next"] = pid

    def try_end():
        # python: the generation that ran the call said X and forked the one
        # it announced, which waits for the next call (the old one, with any
        # thread the call started, is killed); javascript: the driver said X
        # and waits for the next call.
        c = call
        if c is None or not c["said"]:
            return
        interp_frames()  # what the driver said before it waits, first
        if lang == "python":
            if not c["next"] or not waits_for_call(c["next"], st8["fd"]):
                return
            old = st8["pid"]
            st8["pid"] = c["next"]
            stop(c["next"])
            try:
                os.kill(old, signal.SIGKILL)
            except OSError:
                pass
        else:
            if not waits_for_call(st8["pid"], st8["fd"]):
                return
            stop(st8["pid"])
        sweep(keep(st8["pid"]))
        finish()

    def children_ended():
        reap()
        for pid in list(exited):
            status = exited.pop(pid)
            c = call
            if c is None:
                continue
            if c["bash"] is not None and pid == c["bash"]["pid"]:
                bash_ended(status)
                continue
            if pid == st8["pid"]:
                interp_frames()  # what it said before it ended counts
            if pid == st8["pid"] and not (lang == "python" and c["said"]):
                # The interpreter ended during the call: its state is gone.
                ended_with(c, status)
                c["lost"] = True
                sweep(keep())
                start_interp()
                finish()

    def stop_all():
        # Every process of the session but this one (and the client of the
        # connection served) is killed, and a fresh
        # interpreter waits.
        nonlocal call
        if call is not None and call["bash"] is not None:
            bash_done(call["bash"])
        call = None
        sweep(keep())
        drop_queued()
        start_interp()

    def reset():
        stop_all()
        send(b"Z", st8["version"].encode())

    # Listening: one connection at a time is the control channel. It is
    # accepted only while no call runs (nothing of the session runs then),
    # and only from a live process whose parent is outside the pod's PID
    # namespace (PPid 0: started by an exec into the pod, never by the
    # session, whose every process descends from this one); the process is
    # named by a descriptor of its own where the kernel gives one
    # (SO_PEERPIDFD), so that a process of the session that connected
    # during a call and was killed at its end cannot pass for another that
    # has its pid. Every process of the session that was alive while the
    # session's code ran is killed at the call's end (sweep), but the
    # stopped interpreter and the connection's own client, which was
    # accepted before the call began; so a client that is accepted was
    # started while nothing of the session ran. The greeting is an R frame
    # (the interpreter's version); a refusal is an F frame, and the
    # connection is closed. When the connection ends during a call (its
    # client was killed, or its stream cut), the call is stopped as by reset,
    # and the next connection is awaited.
    class Dropped(Exception):
        pass

    def peer_refused(c):
        # Why the process that made connection c may not use it, or "".
        pid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        try:
            pidfd = c.getsockopt(socket.SOL_SOCKET, 77)  # SO_PEERPIDFD
        except OSError:
            pidfd = -1

        def alive_peer():
            if pidfd < 0:
                return alive(pid)
            return libc.syscall(424, pidfd, 0, None, 0) == 0  # pidfd_send_signal
        try:
            if pid <= 0 or not alive_peer():
                return "the connecting process has ended"
            try:
                with open("/proc/%d/status" % pid) as f:
                    ppid = [l.split()[1] for l in f if l.startswith("PPid:")]
            except OSError:
                ppid = []
            if not alive_peer():
                return "the connecting process has ended"
            if ppid != ["0"]:
                return "the connecting process (pid %d) is one of the session's" % pid
            return ""
        finally:
            if pidfd >= 0:
                os.close(pidfd)

    def accept():
        nonlocal conn, conn_pid, cin, cout
        try:
            c, _ = ctl_listener.accept()
        except OSError:
            return
        c.setblocking(True)
        try:
            why = peer_refused(c)
        except OSError as e:
            why = "its process could not be checked (%s)" % e
        if why:
            try:
                framer(c.fileno())(b"F", ("refused: " + why).encode())
                # What it sent is read and dropped first, so that the
                # refusal reaches it (not a reset).
                c.setblocking(False)
                for _ in range(64):
                    if not c.recv(1 << 16):
                        break
            except OSError:
                pass
            c.close()
            return
        sel.unregister(ctl_listener)
        conn, cin, cout = c, c.fileno(), c.fileno()
        conn_pid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        sel.register(cin, selectors.EVENT_READ, "cin")
        send(b"R", st8["version"].encode())

    def dropped():
        nonlocal conn, conn_pid, cin, cout
        sel.unregister(cin)
        conn.close()
        conn, conn_pid, cin, cout = None, 0, -1, -1
        inbuf.clear()
        if call is not None:
            stop_all()
        sel.register(ctl_listener, selectors.EVENT_READ, "accept")

    # The server's commands: "call <code bytes> <stdin bytes>" and the
    # bytes, "files <count>" and the records, "changes", "relay <pid>",
    # "reset".
    inbuf = bytearray()

    def fill():
        while True:
            try:
                d = os.read(cin, 1 << 20)
            except BlockingIOError:
                s = selectors.DefaultSelector()
                s.register(cin, selectors.EVENT_READ)
                s.select()
                s.close()
                continue
            except OSError:
                if ctl_listener is None:
                    raise
                d = b""
            if not d and ctl_listener is not None:
                raise Dropped()
            if not d:
                # The server is gone (or closed the session): so is the
                # session.
                sweep()
                os._exit(0)
            inbuf.extend(d)
            return

    def need(n):
        while len(inbuf) < n:
            fill()
        b = bytes(inbuf[:n])
        del inbuf[:n]
        return b

    def need_line():
        while True:
            i = inbuf.find(b"\n")
            if i >= 0:
                return need(i + 1)[:-1]
            fill()

    def command():
        f = need_line().split()
        if f[:1] == [b"call"] and len(f) == 3 and call is None:
            code = need(int(f[1]))
            start_call(code, need(int(f[2])))
        elif f[:1] == [b"files"] and len(f) == 2 and call is None:
            write_files(int(f[1]))
        elif f == [b"changes"] and call is None:
            changes()
        elif f[:1] == [b"relay"] and len(f) == 2 and call is None:
            set_relay(int(f[1]))
        elif f == [b"reset"]:
            reset()
        else:
            fail("bad command %r" % b" ".join(f)[:60])

    def serve():
        while True:
            polling = call is not None and call["said"]
            for key, _ in sel.select(0.0002 if polling else None):
                what = key.data
                if what == "cin":
                    try:
                        fill()
                        while b"\n" in inbuf:
                            command()
                    except Dropped:
                        dropped()
                        break  # what else this round saw is seen again
                elif what == "accept":
                    accept()
                    break
                elif what == "wake":
                    try:
                        os.read(wake_r, 512)
                    except OSError:
                        pass
                elif what == "interp":
                    interp_frames()
                elif what == "to":
                    to_interp()
                elif what in (b"O", b"E"):
                    bash_out(what)
                elif what == "stdin":
                    bash_stdin()
            children_ended()
            try_end()

    start_relay()
    try:
        start_interp()
    except OSError as e:
        fail("the %s interpreter did not start: %s" % (lang, e))
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    if ctl_listener is not None:
        sel.register(ctl_listener, selectors.EVENT_READ, "accept")
    else:
        sel.register(cin, selectors.EVENT_READ, "cin")
        send(b"R", st8["version"].encode())
    try:
        serve()
    except Exception as e:
        fail("the session's supervisor failed: %s: %s" % (type(e).__name__, e))


_codeexec_supervisor(sys.argv[1:])
