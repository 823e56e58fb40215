//go:build linux

package process_test

import (
	"os"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// Three processes of 200 MiB each fit every per-process rlimit of a 256m
// run, but not its cgroup: the kernel kills one, and the result says so.
func TestOOMKillIsReported(t *testing.T) {
	r := newRunnerWith(t)
	if os.Geteuid() != 0 && !protection(r, "memory cgroup").Active {
		// An ordinary user has a cgroup only where the host delegates one.
		t.Skipf("memory cgroup unavailable to an ordinary user here: %s", protection(r, "memory cgroup").Detail)
	}
	requireActive(t, r, "memory cgroup")
	req := sandboxtest.Req("python", `import os, time
for i in range(3):
    if os.fork() == 0:
        b = bytearray(200 << 20)
        time.sleep(2)
        os._exit(0)
for i in range(3):
    os.wait()
print("all done")`)
	req.Limits.MemoryBytes = 256 << 20
	res, err := r.Run(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OOMKilled || res.LimitHit() != "memory" {
		t.Fatalf("OOMKilled = %v (exit %d, stdout %q, stderr %q)", res.OOMKilled, res.ExitCode, res.Stdout, res.Stderr)
	}
}

// The program is an ordinary user inside its user namespace, with no uid 0
// to become, and starts in an empty session keyring of its own.
func TestProgramIsAnOrdinaryUserInside(t *testing.T) {
	r := newRunnerWith(t)
	requireActive(t, r, "user namespace")
	res := runCode(t, r, "bash", `id -u; cat /proc/self/uid_map | tr -s ' '; grep -c . /proc/keys || true`)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) < 2 || lines[0] != "1000" || strings.TrimSpace(lines[1]) != "1000 0 1" {
		t.Fatalf("inside its namespace the program is not uid 1000 alone: %q %q", res.Stdout, res.Stderr)
	}
}
