//go:build linux

package process_test

import (
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/internal/executor"
	"github.com/codeexec/codeexec/sandbox/process"
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

// The program is an ordinary user inside its user namespace, docker mode's
// uid 10001, with no uid 0 to become, and starts in an empty session
// keyring of its own.
func TestProgramIsAnOrdinaryUserInside(t *testing.T) {
	r := newRunnerWith(t)
	requireActive(t, r, "user namespace")
	res := runCode(t, r, "bash", `id -u; cat /proc/self/uid_map | tr -s ' '; grep -c . /proc/keys || true`)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) < 2 || lines[0] != "10001" || strings.TrimSpace(lines[1]) != "10001 0 1" {
		t.Fatalf("inside its namespace the program is not uid 10001 alone: %q %q", res.Stdout, res.Stderr)
	}
}

// TestRunUserHasNoHostAccountName: whoami, id and python's getpass name the
// run's user sandbox (its group too), as in docker mode, and the run's user
// database names no host account: root and nobody (the overflow id of what
// the run's user namespace does not map) besides. As root without user
// namespaces, the run's own host user is named so too. Without a mount
// namespace the host's database is all there is: the uid is then docker
// mode's 10001, which the test host gives no account.
func TestRunUserHasNoHostAccountName(t *testing.T) {
	const probe = `whoami; id -un; id -gn; id; python3 -c 'import getpass; print(getpass.getuser())'; getent passwd | cut -d: -f1 | sort | tr '\n' ' '; echo; stat -c %U /usr/bin/env`
	check := func(t *testing.T, r *process.Runner) {
		res := runCode(t, r, "bash", probe)
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if len(lines) != 7 || lines[0] != "sandbox" || lines[1] != "sandbox" || lines[2] != "sandbox" || lines[4] != "sandbox" ||
			!strings.Contains(lines[3], "(sandbox) gid=") || strings.TrimSpace(lines[5]) != "nobody root sandbox" || lines[6] != "nobody" && lines[6] != "root" {
			t.Fatalf("the run's user and database: %q (stderr %q); want sandbox five times, the accounts nobody root sandbox, and /usr/bin/env owned by nobody (root without a user namespace)", res.Stdout, res.Stderr)
		}
	}
	t.Run("user namespace", func(t *testing.T) {
		r := newRunnerWith(t)
		requireActive(t, r, "mount namespace")
		requireActive(t, r, "user namespace")
		check(t, r)
	})
	t.Run("root without a user namespace", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("only root runs as host users of their own without a user namespace")
		}
		r := newRunnerWith(t, process.FeatureUser)
		requireActive(t, r, "mount namespace")
		check(t, r)
	})
	t.Run("no mount namespace", func(t *testing.T) {
		r := newRunnerWith(t, process.FeatureMount)
		requireActive(t, r, "user namespace")
		if u, err := user.LookupId(strconv.Itoa(executor.ProgramUID)); err == nil {
			t.Skipf("this host has an account for uid %d (%s), which runs without a mount namespace show", executor.ProgramUID, u.Username)
		}
		res := runCode(t, r, "bash", `id -u; whoami || echo NONAME`)
		if got := strings.Fields(res.Stdout); len(got) != 2 || got[0] != strconv.Itoa(executor.ProgramUID) || got[1] != "NONAME" {
			t.Fatalf("without a mount namespace: %q (stderr %q); want uid %d with no name", res.Stdout, res.Stderr, executor.ProgramUID)
		}
	})
}
