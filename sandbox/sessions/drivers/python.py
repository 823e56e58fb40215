# codeexec session driver for python: one live interpreter whose __main__
# namespace persists between calls, as in a notebook. See sandbox/sessions
# (protocol.go) for the protocol. It runs in a fork of the session's
# supervisor (supervisor.py), which starts python isolated (-I -S): the
# site directories and the session's packages are added here. argv: the control input and
# output, fd:N each.
import os, sys


def _codeexec_session(argv):
    import io, linecache, threading, time, traceback
    if sys.flags.no_site and "site" not in sys.modules:
        import site
        site.main()
    # The session's packages, after the standard library (see
    # sandbox/python.go): never in place of a standard module, and no .pth
    # file of theirs is processed.
    _codeexec_use_packages(os.environ.get("CODEEXEC_PACKAGES"))

    cin = os.fdopen(int(argv[0][3:]), "rb")
    cout = int(argv[1][3:])
    for fd in (cin.fileno(), cout):
        os.set_inheritable(fd, False)
    lock = threading.Lock()
    # The supervisor's own frame writer (this runs in a fork of it).
    frame = sys.modules["__main__"].__dict__.pop("_codeexec_framer")(cout, lock)

    def fail(msg):
        frame(b"F", msg.encode())
        os._exit(125)

    null = os.open(os.devnull, os.O_RDWR)
    os.set_inheritable(null, False)
    os.dup2(null, 0)
    os.dup2(null, 1)
    g = sys.modules["__main__"].__dict__
    g.pop("_codeexec_session", None)
    g.pop("_codeexec_use_packages", None)
    g["__file__"] = "<session>"
    sys.argv[:] = [""]
    version = ("python " + sys.version.split()[0]).encode()
    frame(b"R", b"%d " % os.getpid() + version)
    n = 0
    while True:
        h = cin.readline()
        if not h:
            os._exit(0)
        try:
            clen, slen = (int(x) for x in h.split())
        except ValueError:
            fail("bad call header")
        code = cin.read(clen)
        stdin = cin.read(slen)
        if len(code) != clen or len(stdin) != slen:
            fail("the call was cut short")
        n += 1
        name = "<cell %d>" % n
        src = code.decode("utf-8", "surrogateescape")
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)

        ro, wo = os.pipe()
        re_, we = os.pipe()
        ri, wi = os.pipe()
        state = {"stale": False}

        def pump(fd, kind):
            while True:
                try:
                    b = os.read(fd, 65536)
                except OSError:
                    b = b""
                if not b:
                    os.close(fd)
                    return
                if not state["stale"]:
                    frame(kind, b)

        def feed():
            try:
                v = memoryview(stdin)
                while v:
                    v = v[os.write(wi, v):]
            except OSError:
                pass
            os.close(wi)

        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        os.dup2(wo, 1)
        os.dup2(we, 2)
        os.dup2(ri, 0)
        for fd in (wo, we, ri):
            os.close(fd)
        readers = [threading.Thread(target=pump, args=(ro, b"O"), daemon=True),
                   threading.Thread(target=pump, args=(re_, b"E"), daemon=True),
                   threading.Thread(target=feed, daemon=True)]
        for t in readers:
            t.start()
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)), encoding="utf-8")
        rc = 0
        try:
            exec(compile(src, name, "exec", dont_inherit=True), g)
        except SystemExit as e:
            if e.code is None:
                rc = 0
            elif isinstance(e.code, int):
                rc = e.code & 0xFF
            else:
                print(e.code, file=sys.stderr)
                rc = 1
        except BaseException as e:
            tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
            try:
                traceback.print_exception(type(e), e, tb)
            except Exception:
                pass
            rc = 130 if isinstance(e, KeyboardInterrupt) else 1
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(null, 2)
        # What a process started by the call still writes after a short
        # grace (a quarter of a second for both streams together) is
        # dropped, so that each call's output is its own.
        grace = time.monotonic() + 0.25
        for t in readers[:2]:
            t.join(max(0.0, grace - time.monotonic()))
        state["stale"] = True
        frame(b"X", str(rc).encode())
        # The session goes on in a fork of this process, with the whole
        # state but only this thread; this one, with every thread the call
        # started, ends (and the supervisor makes sure of it).
        lock.acquire()  # no thread left by the call may hold it in the fork
        # A process slot may still be held by a process that the call
        # started and the supervisor is killing: tried again for up to 10 s.
        delay, give_up = 0.001, time.monotonic() + 10
        while True:
            try:
                pid = os.fork()
                break
            except BlockingIOError:
                if time.monotonic() >= give_up:
                    raise
                time.sleep(delay)
                delay = min(2 * delay, 0.1)
        lock.release()
        if pid:
            os._exit(0)
        frame(b"R", b"%d " % os.getpid() + version)


_codeexec_session(sys.argv[1:])
