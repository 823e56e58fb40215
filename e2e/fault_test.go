package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Faults that lifecycle_test.go does not cover: codeexec killed with
// SIGKILL (nothing of it runs its cleanup), and the Docker Engine restarted
// under a running server. (A client that goes away mid-run, and SIGTERM or
// SIGINT with runs in flight, are in lifecycle_test.go.)

// TestFaultSIGKILLProcess: a process-mode server killed with SIGKILL takes
// its runs with it (the supervisor has a parent-death signal, and in a PID
// namespace everything dies with it); the next server started with the same
// CODE_EXEC_WORK_DIR removes the dead server's work root at start.
func TestFaultSIGKILLProcess(t *testing.T) {
	t.Parallel()
	env := serverEnv(t, nil)
	dir := env["CODE_EXEC_WORK_DIR"]
	s := startHTTP(t, http_, env)
	cs := dial(t, s, connectOpts{})
	m := marker()
	errc := startSleep(t, context.Background(), cs, m)
	procs := descendants(s.cmd.Process.Pid)
	roots, _ := filepath.Glob(filepath.Join(dir, "codeexec-*"))
	if len(roots) != 1 || len(procs) == 0 {
		t.Fatalf("with a run in flight: work roots %q (want 1), %d processes below the server (want some)", roots, len(procs))
	}

	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := s.waitExit(t, 30*time.Second); code != -1 {
		t.Errorf("exit code %d after SIGKILL, want -1 (killed by a signal)", code)
	}
	waitGone(t, m)
	var left []procID
	waitFor(t, eventWait, "the processes of the killed server to end", func() bool {
		left = left[:0]
		for _, p := range procs {
			if procAlive(p) {
				left = append(left, p)
			}
		}
		return len(left) == 0
	}, func() string { return "still running: " + describeProcs(left) })
	select {
	case err := <-errc:
		if err == nil {
			t.Errorf("the call in flight succeeded after its server was killed")
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the call in flight did not return within 30 s of its server being killed")
	}
	if _, err := os.Stat(roots[0]); err != nil {
		t.Fatalf("the killed server's work root should still be there (nothing ran its cleanup): %v", err)
	}

	// The next server removes the dead server's work root as it starts.
	s2 := startHTTP(t, http_, env)
	if _, err := os.Stat(roots[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the next server did not remove the dead server's work root %s at start (stat: %v)", roots[0], err)
	}
	if !strings.Contains(s2.stderr.String(), "removed the work root of a server that died") {
		t.Errorf("the next server did not log the removal of the dead server's work root")
	}
	checkExample(t, dial(t, s2, connectOpts{}), "process")
	if err := s2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s2.waitExit(t, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	assertDirEmpty(t, dir)
}

// TestFaultSIGKILLDocker: a docker-mode server killed with SIGKILL leaves
// its containers on the engine: warm ones (which stop by themselves) and
// run containers still running their program. The next server on the same
// engine and host removes them all at start, because their owner label
// names a process of this host that no longer runs.
func TestFaultSIGKILLDocker(t *testing.T) {
	t.Parallel()
	cli := dockerEngine(t)
	// One warm container per language: of three runs sent at once, the
	// first takes the warm bash container and the others go cold.
	env := serverEnv(t, map[string]string{"CODE_EXEC_SANDBOX": "docker", "CODE_EXEC_DOCKER_POOL_SIZE": "1", "CODE_EXEC_LOG_LEVEL": "info"})
	s := startHTTP(t, http_, env)
	instance := logField(s.stderr.String(), "docker sandbox ready", "instance")
	if instance == "" {
		t.Fatalf("the docker-mode server did not log its instance id")
	}
	waitWarm(t, cli, instance, 3, 2*time.Minute)
	cs := dial(t, s, connectOpts{})

	markers := []string{marker(), marker(), marker()}
	errc := make(chan error, len(markers))
	for _, m := range markers {
		go func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
				"language": "bash", "code": "sleep " + m + "; echo finished", "timeout_seconds": 50,
			}})
			if err == nil && !res.IsError {
				err = fmt.Errorf("the run finished normally: %q", text(res))
			}
			errc <- err
		}()
	}
	for _, m := range markers {
		waitAlive(t, m)
	}
	pid := s.cmd.Process.Pid
	before := containersOf(t, cli, instance)
	for _, c := range before {
		o := c.Labels["io.codeexec.owner"]
		if !strings.Contains(o, "/"+strconv.Itoa(pid)+"/") {
			t.Errorf("container %.12s has owner label %q, which does not name the server's pid %d", c.ID, o, pid)
		}
	}

	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.waitExit(t, 30*time.Second)
	for range markers {
		select {
		case err := <-errc:
			if err == nil {
				t.Errorf("a call in flight succeeded after its server was killed")
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("a call in flight did not return within 30 s of its server being killed")
		}
	}
	left := containersOf(t, cli, instance)
	runningRuns := 0
	for _, c := range left {
		if c.Labels["io.codeexec.role"] == "run" && c.State == container.StateRunning {
			runningRuns++
		}
	}
	t.Logf("the killed server left %d containers: %s", len(left), describeContainers(left))
	if runningRuns == 0 {
		t.Fatalf("precondition: no run container of the killed server is still running (three runs were sent at once to a pool of one); left: %s", describeContainers(left))
	}
	for _, m := range markers {
		if !alive(m) {
			t.Fatalf("precondition: the program %s stopped with its server; the test needs it running", m)
		}
	}

	// The next server removes every container of the dead one at start,
	// before it answers anything.
	s2 := startHTTP(t, http_, serverEnv(t, map[string]string{"CODE_EXEC_SANDBOX": "docker", "CODE_EXEC_LOG_LEVEL": "info"}))
	if left := containersOf(t, cli, instance); len(left) > 0 {
		t.Errorf("the next server left %d containers of the killed one on the engine: %s", len(left), describeContainers(left))
	}
	for _, m := range markers {
		waitGone(t, m)
	}
	removed := 0
	for _, rec := range logRecords(s2.stderr.String(), "removed leftover container") {
		if rec["instance"] == instance && rec["reason"] == "its server no longer runs" {
			removed++
		}
	}
	if removed < runningRuns {
		t.Errorf("the next server logged %d removals of the killed server's containers because it no longer runs, want at least %d", removed, runningRuns)
	}
	instance2 := logField(s2.stderr.String(), "docker sandbox ready", "instance")
	checkExample(t, dial(t, s2, connectOpts{}), "docker")
	if err := s2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s2.waitExit(t, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if left := containersOf(t, cli, instance2); len(left) > 0 {
		t.Errorf("the next server left %d containers of its own: %s", len(left), describeContainers(left))
	}
}

// waitWarm waits until n warm containers of instance run.
func waitWarm(t *testing.T, cli *client.Client, instance string, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		warm := 0
		for _, c := range containersOf(t, cli, instance) {
			if c.Labels["io.codeexec.role"] == "pool" && c.State == container.StateRunning {
				warm++
			}
		}
		if warm >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d warm containers run after %s", warm, n, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logRecords returns the JSON log records with message msg.
func logRecords(logs, msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestFaultEngineRestart: the Docker Engine restarts under a docker-mode
// server with a run in flight. The run gets a clear answer (never a hang,
// never a success), and the same server runs code again once the engine is
// back, without being restarted.
//
// It stops the engine that every other docker test uses, so it runs only
// when CODE_EXEC_TEST_ENGINE_RESTART=1, on its own (.ci/run does so after
// the main test step):
//
//	CODE_EXEC_TEST_ENGINE_RESTART=1 go test ./e2e/ -run TestFaultEngineRestart -count=1 -v
func TestFaultEngineRestart(t *testing.T) {
	if os.Getenv("CODE_EXEC_TEST_ENGINE_RESTART") != "1" {
		t.Skip("restarts the Docker Engine under every other test; set CODE_EXEC_TEST_ENGINE_RESTART=1 and run it alone")
	}
	cli := dockerEngine(t)
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ensure := filepath.Join(root, ".ci", "ensure-docker.sh")
	env := serverEnv(t, map[string]string{"CODE_EXEC_SANDBOX": "docker", "CODE_EXEC_MAX_TIMEOUT": "5m", "CODE_EXEC_LOG_LEVEL": "info"})
	s := startHTTP(t, http_, env)
	// Registered after the server, so it runs before the server is stopped:
	// whatever happened, the engine answers again when the test ends, and
	// the server can remove its containers.
	t.Cleanup(func() { startEngine(t, cli, ensure) })
	instance := logField(s.stderr.String(), "docker sandbox ready", "instance")
	waitWarm(t, cli, instance, 3, 2*time.Minute)
	cs := dial(t, s, connectOpts{})

	m := marker()
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
			"language": "bash", "code": "sleep " + m + "; echo finished", "timeout_seconds": 240,
		}})
		done <- outcome{res, err}
	}()
	waitAlive(t, m)

	pid := dockerdPID(t)
	t.Logf("stopping dockerd (pid %d) with SIGTERM", pid)
	if p, err := os.FindProcess(pid); err != nil {
		t.Fatalf("finding dockerd: %v", err)
	} else if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signalling dockerd: %v", err)
	}
	if err := sandboxtest.WaitExited(pid, 2*time.Minute); err != nil {
		t.Fatalf("dockerd (pid %d) after SIGTERM: %v", pid, err)
	}
	t.Logf("dockerd exited")

	var got outcome
	select {
	case got = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the call in flight did not return within 2 minutes of the engine stopping")
	}
	waitGone(t, m)
	startEngine(t, cli, ensure)

	// What the run in flight must answer: the engine's failure, as an error
	// result that names the sandbox and the Docker Engine in one line. (The
	// engine kills its containers as it stops, and may still report the
	// exit: the runner knows a container stopped from outside, whose
	// supervisor wrote no trailer, from a program that ended.) Never a
	// success or an exit code, never a protocol error, never a hang.
	if got.err != nil {
		t.Fatalf("the call in flight failed at the protocol level: %v", got.err)
	}
	msg := text(got.res)
	t.Logf("the call in flight answered: isError=%v %q", got.res.IsError, msg)
	if !got.res.IsError || got.res.StructuredContent != nil {
		t.Errorf("the call in flight answered isError=%v with structuredContent %v, want an error result without one", got.res.IsError, got.res.StructuredContent)
	}
	if lower := strings.ToLower(msg); !strings.Contains(lower, "sandbox") || !strings.Contains(lower, "docker engine") {
		t.Errorf("the error does not name the sandbox and the Docker Engine: %q", msg)
	}
	if strings.Contains(strings.TrimSpace(msg), "\n") || strings.Contains(msg, "finished") {
		t.Errorf("the error is not one line, or shows output the program never wrote: %q", msg)
	}

	// The same server recovers: a new call succeeds once the engine is
	// back (the pool rebuilds in the background; a run goes cold meanwhile).
	deadline := time.Now().Add(2 * time.Minute)
	tries := 0
	for {
		tries++
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": "print(2**64)"}})
		cancel()
		if err != nil {
			t.Fatalf("after the engine restart, try %d: protocol error %v", tries, err)
		}
		if !res.IsError {
			out := decodeExec(t, res)
			if out.Stdout != "18446744073709551616\n" || out.Sandbox != "docker" {
				t.Fatalf("after the engine restart: stdout=%q sandbox=%q", out.Stdout, out.Sandbox)
			}
			break
		}
		if !strings.Contains(strings.ToLower(text(res)), "sandbox") {
			t.Errorf("after the engine restart, try %d: an error that does not name the sandbox: %q", tries, text(res))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not run code again within 2 minutes of the engine's return (%d tries); last answer: %q", tries, text(res))
		}
		time.Sleep(time.Second)
	}
	t.Logf("the server ran code again after %d tries", tries)
	checkExample(t, cs, "docker")

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.waitExit(t, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if left := containersOf(t, cli, instance); len(left) > 0 {
		t.Errorf("the server left %d containers on the engine: %s", len(left), describeContainers(left))
	}
}

// dockerdPID finds the pid of the local dockerd.
func dockerdPID(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(comm)) == "dockerd" && pidAlive(pid) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("found %d dockerd processes (%v), want exactly one on this host", len(pids), pids)
	}
	return pids[0]
}

// pidAlive reports whether pid runs (and is not a zombie).
func pidAlive(pid int) bool { return sandboxtest.PidAlive(pid) }

// startEngine makes sure the engine answers, starting it as CI does.
func startEngine(t *testing.T, cli *client.Client, ensure string) {
	t.Helper()
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cli.Ping(ctx, client.PingOptions{})
		return err
	}
	if ping() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", ensure)
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("starting the Docker Engine again with %s: %v\n%s", ensure, err, out)
	}
	t.Logf("%s:\n%s", ensure, strings.TrimSpace(string(out)))
	if err := ping(); err != nil {
		t.Fatalf("the Docker Engine does not answer after %s: %v", ensure, err)
	}
}
