"""What a run would cost from an interpreter that has loaded, forked into new
namespaces, against a fresh start of the interpreter: a measurement for
process mode's back-to-back CPU (docs/performance.md#where-a-process-mode-runs-cpu-goes),
not part of codeexec.

    /usr/bin/python3 sandbox/bench/forkserver_probe.py [RUNS]

Each run of print(2**64), in turns and in a random order:
- fresh: /usr/bin/python3 -I -B -c PROGRAM, forked and executed by this
  process;
- forked: this process (its interpreter loaded, compile warmed up) forks a
  child that unshares a user, mount, UTS, IPC, PID and network namespace
  (user 0 inside is the caller's own uid outside, mapped by this process
  from outside, as the server maps a supervisor's), forks again to become PID 1's child in the new
  PID namespace, and there compiles and runs the program.
It prints the CPU of each run's processes (getrusage of the waited child and
its descendants) and, in a second pass of each kind alone, the whole
machine's CPU a run (/proc/stat, kernel work such as a network namespace's
clean-up included). Nothing here applies codeexec's other isolation (the
minimal root, Landlock, seccomp, limits, cgroups): it measures the part of a
run that an interpreter started ahead still pays for, its start.
"""
import ctypes
import os
import random
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
FLAGS = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
PROGRAM = "print(2**64)"
PYTHON = "/usr/bin/python3"

libc = ctypes.CDLL(None, use_errno=True)
compile("", "warm", "exec")


def to_null():
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)


def in_child(body):
    """Runs body in a forked child and ends the child with its exit status:
    whatever happens, the child never returns into the caller's loop."""
    status = 1
    try:
        status = body()
    except BaseException as e:
        os.write(2, f"probe child: {e!r}\n".encode())
    finally:
        os._exit(status)


def forked_child(unshared_r, unshared_w, mapped_r, mapped_w):
    os.close(unshared_r)
    os.close(mapped_w)
    if libc.unshare(FLAGS) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    os.write(unshared_w, b"u")
    if os.read(mapped_r, 1) != b"m":
        return 91
    child = os.fork()
    if child == 0:
        in_child(run_program)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def run_program():
    to_null()
    exec(compile(PROGRAM, "/run/main.py", "exec", dont_inherit=True), {"__name__": "__main__"})
    sys.stdout.flush()
    return 0


def forked():
    """One run forked from this interpreter into new namespaces; its CPU in s."""
    unshared_r, unshared_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        in_child(lambda: forked_child(unshared_r, unshared_w, mapped_r, mapped_w))
    os.close(unshared_w)
    os.close(mapped_r)
    if os.read(unshared_r, 1) != b"u":
        sys.exit("the child could not unshare its namespaces")
    os.close(unshared_r)
    uid, gid = os.geteuid(), os.getegid()
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(f"0 {uid} 1\n")
    with open(f"/proc/{pid}/setgroups", "w") as f:
        f.write("deny")
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(f"0 {gid} 1\n")
    os.write(mapped_w, b"m")
    os.close(mapped_w)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"a forked run failed: {status}")
    return usage.ru_utime + usage.ru_stime


def fresh():
    """One run of a fresh interpreter; its CPU in s."""
    pid = os.fork()
    if pid == 0:
        in_child(lambda: (to_null(), os.execv(PYTHON, [PYTHON, "-I", "-B", "-c", PROGRAM])))
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"a fresh run failed: {status}")
    return usage.ru_utime + usage.ru_stime


def busy_ms():
    with open("/proc/stat") as stat:
        f = stat.readline().split()
    ticks = sum(int(f[i]) for i in (1, 2, 3, 6, 7))  # user nice system irq softirq
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    kinds = {"fresh": fresh, "forked": forked}
    cpu = {k: [] for k in kinds}
    for _ in range(runs):
        order = list(kinds)
        random.shuffle(order)
        for k in order:
            cpu[k].append(kinds[k]() * 1000)
    for k, v in cpu.items():
        v.sort()
        print(f"{k:7} its processes: mean {sum(v) / runs:6.2f} ms, median {v[runs // 2]:6.2f} ms of CPU a run")
    for k, run in kinds.items():
        before = busy_ms()
        for _ in range(runs):
            run()
        print(f"{k:7} whole machine: {(busy_ms() - before) / runs:6.2f} ms of CPU a run")


if __name__ == "__main__":
    main()
