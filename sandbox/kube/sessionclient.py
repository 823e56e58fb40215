# codeexec session client (kubernetes mode): what each call of a session runs
# over pods/exec in the session's pod. It connects to the session's supervisor
# (PID 1, listening on the abstract unix socket argv[1]) and relays bytes both
# ways: its stdin (the server's requests) to the supervisor, the supervisor's
# frames to its stdout, until the supervisor closes the connection. See
# sandbox/kube/session.go.
import ctypes, errno, os, selectors, socket, struct, sys, time

# First of all: no process of the session may read this one's memory or
# descriptors, trace it or write into its output (the call's result).
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE


def fail(msg):
    os.write(2, ("codeexec session client: %s\n" % msg).encode())
    os._exit(2)


s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
# The supervisor binds the socket as it starts: until then (the first call
# of a new pod) there is nothing to connect to, for a while.
deadline = time.monotonic() + 60
while True:
    try:
        s.connect("\0" + sys.argv[1])
        break
    except OSError as e:
        if e.errno not in (errno.ECONNREFUSED, errno.ENOENT) or time.monotonic() > deadline:
            fail("cannot reach the session's supervisor: %s" % e)
        time.sleep(0.02)
# Only PID 1, the supervisor, holds the name: it is bound before anything of
# the session runs and held for the session's life.
pid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
if pid != 1:
    fail("the socket %s is not the supervisor's (its process is %d, not 1)" % (sys.argv[1], pid))

sel = selectors.DefaultSelector()
sel.register(0, selectors.EVENT_READ, "in")
sel.register(s, selectors.EVENT_READ, "sock")
while True:
    for key, _ in sel.select():
        if key.data == "in":
            d = os.read(0, 1 << 16)
            if d:
                s.sendall(d)
            else:
                # The server is done: the supervisor ends the connection.
                sel.unregister(0)
                s.shutdown(socket.SHUT_WR)
        else:
            d = s.recv(1 << 16)
            if not d:
                os._exit(0)
            v = memoryview(d)
            while v:
                v = v[os.write(1, v):]
