package docker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
	"github.com/codeexec/codeexec/sandbox/internal/warmpool"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// poolConfig is a Runner configuration with a warm pool whose containers
// suit sandboxtest.Req.
func poolConfig(size int, langs ...string) Config {
	return Config{PoolSize: size, PoolLimits: sandboxtest.DefaultLimits(), Languages: langs}
}

// waitWarm waits until the pool holds at least n warm containers of lang.
func waitWarm(t testing.TB, r *Runner, lang string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.pool.Wait(ctx, func(st warmpool.Stats) bool { return st.Ready[lang] >= n }); err != nil {
		t.Fatalf("waiting for %d warm %s containers: %v", n, lang, err)
	}
}

// warmIDs are the ids of the warm containers r's pool holds, as the engine
// lists them (by the Runner's instance and the role "pool").
func warmIDs(t testing.TB, cli *client.Client, r *Runner) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return labelledContainers(ctx, t, cli, LabelInstance+"="+r.instance, LabelRole+"="+rolePool)
}

// warmOnly is a Runner that waits for a warm container before each run, so
// that every run of the shared suite is served by the pool.
type warmOnly struct {
	*Runner
	t testing.TB
}

func (w warmOnly) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if lang, err := sandbox.CanonicalLanguage(req.Language); err == nil && w.cfg.PoolSize > 0 && containerLimits(req.Limits) == containerLimits(w.cfg.PoolLimits) {
		if _, ok := w.interps[lang]; ok {
			waitWarm(w.t, w.Runner, lang, 1)
		}
	}
	return w.Runner.Run(ctx, req)
}

// TestSuiteWarm runs the shared suite on warm containers.
func TestSuiteWarm(t *testing.T) {
	r, cli := newRunner(t, poolConfig(1))
	sandboxtest.RunSuite(t, warmOnly{r, t}, sandboxtest.Options{Mode: sandbox.ModeDocker, ScrubsEnv: true, Alive: alive(r, cli)})
	_, warm := servedOf(r).List()
	n := 0
	for _, w := range warm {
		if w {
			n++
		}
	}
	if n < len(warm)/2 {
		t.Fatalf("only %d of %d runs were served warm", n, len(warm))
	}
	t.Logf("%d of %d runs served warm (the others asked for other container limits)", n, len(warm))
}

// TestWarmAndColdLockedDownAlike checks that one function builds the
// isolation of both kinds of container: their host configurations are the
// same, as built and as the engine holds them, and their configurations
// differ only in the role and deadline labels. The trailer nonce is in
// neither: no process's command line or environment holds it.
func TestWarmAndColdLockedDownAlike(t *testing.T) {
	r, cli := newRunner(t, poolConfig(1, "python"))
	lim := sandboxtest.DefaultLimits()
	now := time.Now()
	warmSpec := r.runSpec("python", lim, rolePool, now.Add(poolLease), nil)
	coldSpec := r.runSpec("python", lim, roleRun, runDeadline(now, lim.Timeout), nil)
	wc, wh := r.configs(warmSpec)
	cc, ch := r.configs(coldSpec)
	if !reflect.DeepEqual(wh, ch) {
		t.Fatalf("host configurations differ:\nwarm %+v\ncold %+v", wh, ch)
	}
	if wc.Labels[LabelRole] != rolePool || cc.Labels[LabelRole] != roleRun {
		t.Fatalf("roles: warm %q cold %q", wc.Labels[LabelRole], cc.Labels[LabelRole])
	}
	for _, c := range []struct {
		cfg   *container.Config
		nonce string
	}{{wc, warmSpec.nonce}, {cc, coldSpec.nonce}} {
		if n := strings.TrimPrefix(c.nonce, runproto.TrailerTag); n == "" || strings.Contains(fmt.Sprint(c.cfg), n) {
			t.Fatalf("the configuration holds the trailer nonce %q: %+v", c.nonce, c.cfg)
		}
	}
	strip := func(c *container.Config) container.Config {
		x := *c
		x.Labels = map[string]string{}
		for k, v := range c.Labels {
			if k != LabelRole && k != LabelDeadline {
				x.Labels[k] = v
			}
		}
		return x
	}
	if w, c := strip(wc), strip(cc); !reflect.DeepEqual(w, c) {
		t.Fatalf("configurations differ beyond role and deadline:\nwarm %+v\ncold %+v", w, c)
	}

	// As the engine holds them: a warm container of the pool and a cold one.
	waitWarm(t, r, "python", 1)
	warmID := warmIDs(t, cli, r)[0]
	cold, err := r.start(context.Background(), coldSpec, "python")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer r.discard(cold)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wi, err := cli.ContainerInspect(ctx, warmID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect warm: %v", err)
	}
	ci, err := cli.ContainerInspect(ctx, cold.id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect cold: %v", err)
	}
	if !reflect.DeepEqual(wi.Container.HostConfig, ci.Container.HostConfig) {
		t.Fatalf("the engine holds different host configurations:\nwarm %+v\ncold %+v", wi.Container.HostConfig, ci.Container.HostConfig)
	}
	hc := wi.Container.HostConfig
	if hc.NetworkMode != "none" || !hc.ReadonlyRootfs || !slices.Contains(hc.CapDrop, "ALL") || !slices.Contains(hc.SecurityOpt, "no-new-privileges") || hc.Memory != lim.MemoryBytes {
		t.Fatalf("the warm container is not locked down: %+v", hc)
	}
}

// TestWarmContainerNeverReused runs on warm containers and checks that each
// run had a container of its own that is then removed.
func TestWarmContainerNeverReused(t *testing.T) {
	r, cli := newRunner(t, poolConfig(2, "python", "bash"))
	const runs = 8
	for i := range runs {
		lang, code := "python", "print(%d)"
		if i%2 == 1 {
			lang, code = "bash", "echo %d"
		}
		waitWarm(t, r, lang, 1)
		res := run(t, r, sandboxtest.Req(lang, fmt.Sprintf(code, i)))
		if res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Fatalf("run %d: stdout %q stderr %q", i, res.Stdout, res.Stderr)
		}
	}
	ids, warm := servedOf(r).List()
	if len(ids) != runs {
		t.Fatalf("%d containers served %d runs", len(ids), runs)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		if !warm[i] {
			t.Errorf("run %d was not served warm", i)
		}
		if seen[id] {
			t.Fatalf("container %s served two runs", shortID(id))
		}
		seen[id] = true
	}
	if left := lingering(t, r, cli, time.Minute); len(left) > 0 {
		t.Fatalf("containers that served a run are still on the engine: %v", left)
	}
}

// TestWarmRunSeesNothingOfAnother leaves files, a process, interpreter
// state and a filled /dev/shm behind in one warm run and looks for them in
// the next.
func TestWarmRunSeesNothingOfAnother(t *testing.T) {
	r, _ := newRunner(t, poolConfig(2, "python"))
	marker := sandboxtest.Marker()
	waitWarm(t, r, "python", 2)
	first := run(t, r, sandboxtest.Req("python", fmt.Sprintf(`import os, subprocess, sys
open("/tmp/left-behind", "w").write("secret")
open("/dev/shm/left-behind", "w").write("secret")
os.environ["LEFT_BEHIND"] = "1"
sys.modules["left_behind"] = sys
subprocess.Popen(["setsid", "sleep", %q], start_new_session=True)
print("left", sorted(os.listdir("/tmp")))`, marker)))
	if !strings.HasPrefix(first.Stdout, "left") || first.ExitCode != 0 {
		t.Fatalf("first run: stdout %q stderr %q", first.Stdout, first.Stderr)
	}
	second := run(t, r, sandboxtest.Req("python", `import os, sys
print(sorted(os.listdir("/tmp")))
print(sorted(os.listdir("/dev/shm")))
print("LEFT_BEHIND" in os.environ, "left_behind" in sys.modules)
print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()) == [1, os.getpid()])`))
	lines := strings.Split(strings.TrimSpace(second.Stdout), "\n")
	want := []string{"['main.py']", "[]", "False False", "True"}
	if !reflect.DeepEqual(lines, want) {
		t.Fatalf("the second run saw something of the first:\n got %q\nwant %q (stderr %q)", lines, want, second.Stderr)
	}
	ids, warm := servedOf(r).List()
	if len(ids) != 2 || !warm[0] || !warm[1] || ids[0] == ids[1] {
		t.Fatalf("runs served by %v (warm %v), want two different warm containers", ids, warm)
	}
	if sandboxtest.ProcessesAlive(t, marker) {
		t.Fatalf("the first run's detached process is still alive")
	}
}

// TestWarmRunBehavesLikeAScript checks what a program can see of how it was
// started: argv, __file__, __main__, tracebacks, exit statuses, stdin, and
// the signals it starts with.
func TestWarmRunBehavesLikeAScript(t *testing.T) {
	r, _ := newRunner(t, poolConfig(1))
	cases := []struct {
		name, lang, code, stdin string
		exit                    int
		stdout, stderr          string // stderr: a substring
		noStderr                string // must not appear in stderr
	}{
		{name: "python main", lang: "python", code: `import sys, __main__, signal
print(sys.argv, __file__, __name__, __main__.__dict__ is globals(), sys.path[0] != "", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
print(sorted(k for k in globals() if k.startswith("_codeexec")))`,
			stdout: "['/tmp/main.py'] /tmp/main.py __main__ True True True\n[]\n"},
		{name: "python traceback", lang: "python", code: "def f():\n    raise ValueError('boom')\nf()", exit: 1,
			stderr: "Traceback (most recent call last):\n  File \"/tmp/main.py\", line 3, in <module>\n    f()\n  File \"/tmp/main.py\", line 2, in f\n    raise ValueError('boom')\nValueError: boom\n", noStderr: "_codeexec"},
		{name: "python syntax error", lang: "python", code: "x = (", exit: 1, stderr: "SyntaxError", noStderr: "Traceback"},
		{name: "python sys.exit message", lang: "python", code: "import sys; sys.exit('bye')", exit: 1, stderr: "bye\n"},
		{name: "python stdin", lang: "python", code: "import sys; print(sys.stdin.read()[::-1])", stdin: "abc", stdout: "cba\n"},
		{name: "python atexit", lang: "python", code: "import atexit; atexit.register(print, 'at exit'); print('main')", stdout: "main\nat exit\n"},
		{name: "javascript main", lang: "javascript", code: `console.log(JSON.stringify([process.argv.slice(1), require.main === module, __filename, process.execArgv, typeof globalThis.require]))`,
			stdout: `[["/tmp/main.js"],true,"/tmp/main.js",[],"undefined"]` + "\n"},
		{name: "javascript uncaught", lang: "javascript", code: "throw new Error('boom')", exit: 1, stderr: "/tmp/main.js:1"},
		{name: "javascript exit code", lang: "javascript", code: "process.exitCode = 4", exit: 4},
		{name: "bash argv", lang: "bash", code: `echo "$0 $#"; trap - INT; kill -INT $$; echo not reached`, exit: 130, stdout: "/tmp/main.sh 0\n"},
		{name: "bash killed", lang: "bash", code: "kill -9 $$", exit: 137},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			waitWarm(t, r, c.lang, 1)
			req := sandboxtest.Req(c.lang, c.code)
			req.Stdin = c.stdin
			res := run(t, r, req)
			if res.ExitCode != c.exit || (c.stdout != "" && res.Stdout != c.stdout) || !strings.Contains(res.Stderr, c.stderr) ||
				(c.noStderr != "" && strings.Contains(res.Stderr, c.noStderr)) {
				t.Fatalf("exit %d stdout %q stderr %q; want exit %d stdout %q stderr containing %q", res.ExitCode, res.Stdout, res.Stderr, c.exit, c.stdout, c.stderr)
			}
			if res.OOMKilled || res.TimedOut {
				t.Fatalf("limit flags on a plain run: %+v", res)
			}
		})
	}
	_, warm := servedOf(r).List()
	for i, w := range warm {
		if !w {
			t.Errorf("run %d was not served warm", i)
		}
	}
}

// TestWarmTimeoutStartsAtHandover: a warm container that waited in the pool
// longer than the run's timeout still gives the program its whole timeout.
// The wait in the pool is the point of the test, so it is a real sleep; the
// timeout leaves the program (half a second of sleep) ten times what it
// needs, so that a busy machine cannot make it time out.
func TestWarmTimeoutStartsAtHandover(t *testing.T) {
	const timeout = 5 * time.Second
	r, _ := newRunner(t, poolConfig(1, "python"))
	waitWarm(t, r, "python", 1)
	time.Sleep(timeout + 500*time.Millisecond)
	req := sandboxtest.Req("python", "import time; time.sleep(0.5); print('ok')")
	req.Limits.Timeout = timeout
	res := run(t, r, req)
	if res.TimedOut || res.Stdout != "ok\n" {
		t.Fatalf("timed out %v stdout %q", res.TimedOut, res.Stdout)
	}
	if _, warm := servedOf(r).List(); len(warm) != 1 || !warm[0] {
		t.Fatalf("served warm: %v, want the one warm container that waited", warm)
	}
}

// TestPoolRefills takes every warm container and waits for the pool to
// make new ones.
func TestPoolRefills(t *testing.T) {
	r, _ := newRunner(t, poolConfig(2, "python"))
	waitWarm(t, r, "python", 2)
	before := r.pool.Stats().Made
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			res, err := r.Run(context.Background(), sandboxtest.Req("python", "print(1)"))
			if err != nil || res.Stdout != "1\n" {
				t.Errorf("run: %+v %v", res, err)
			}
		})
	}
	wg.Wait()
	waitWarm(t, r, "python", 2)
	if made := r.pool.Stats().Made - before; made < 2 {
		t.Fatalf("the pool made %d containers after 2 were taken", made)
	}
	if h := r.pool.Stats().Hits; h < 2 {
		t.Fatalf("%d runs were served warm, want 2", h)
	}
	ps := r.pool.Stats()
	if st := r.PoolStats(); st.Hits != ps.Hits || st.Misses != ps.Misses || st.Ready["python"] != 2 {
		t.Fatalf("PoolStats = %+v, want the pool's counters and 2 python containers ready", st)
	}
}

// TestPoolSaysWhenItDoesNotKeepUp: runs back to back drain a pool of one,
// and about every other one then creates its own container; sandbox_info's warnings (the
// Capabilities) then say that the pool does not keep up and how long
// creating a container takes, and stop saying it once runs with time
// between them find one ready.
func TestPoolSaysWhenItDoesNotKeepUp(t *testing.T) {
	r, _ := newRunner(t, poolConfig(1, "python"))
	sandboxtest.PoolWarning(t, r.Capabilities, r.pool.Stats, func() {
		res, err := r.Run(context.Background(), sandboxtest.Req("python", "print(1)"))
		if err != nil || res.Stdout != "1\n" {
			t.Fatalf("run: %+v %v", res, err)
		}
	}, func() { waitWarm(t, r, "python", 1) }, 20, "no warm container ready", "CODE_EXEC_DOCKER_POOL_SIZE=1", "ms here")
}

// TestPoolGoneAfterClose: Close removes the warm containers.
func TestPoolGoneAfterClose(t *testing.T) {
	cli := engine(t)
	r, err := New(context.Background(), Config{Image: testImage(), Runtime: testRuntime(), PoolSize: 2, PoolLimits: sandboxtest.DefaultLimits(), Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	noteInstance(r.instance)
	for _, l := range []string{"python", "javascript", "bash"} {
		waitWarm(t, r, l, 2)
	}
	if n := instanceContainers(t, cli, r.instance); n < 6 {
		t.Fatalf("%d containers on the engine with a full pool, want at least 6", n)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := instanceContainers(t, cli, r.instance); n != 0 {
		t.Fatalf("%d containers left after Close", n)
	}
}

// TestPoolRecovers removes or kills the warm containers behind the pool's
// back (as an engine restart or an operator would): runs still answer
// correctly, and the pool makes new ones.
func TestPoolRecovers(t *testing.T) {
	for _, how := range []string{"rm -f", "kill"} {
		t.Run(how, func(t *testing.T) {
			r, cli := newRunner(t, poolConfig(2, "python"))
			waitWarm(t, r, "python", 2)
			ids := warmIDs(t, cli, r)
			if len(ids) != 2 {
				t.Fatalf("the engine lists %d warm containers of the Runner, want 2", len(ids))
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, id := range ids {
				var err error
				if how == "kill" {
					_, err = cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
				} else {
					_, err = cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
				}
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
			}
			res := run(t, r, sandboxtest.Req("python", "print(2**64)"))
			if res.Stdout != "18446744073709551616\n" || res.ExitCode != 0 {
				t.Fatalf("run after %s: %+v", how, res)
			}
			waitWarm(t, r, "python", 2)
			res = run(t, r, sandboxtest.Req("python", "print(2**64)"))
			if res.Stdout != "18446744073709551616\n" {
				t.Fatalf("run on the refilled pool: %+v", res)
			}
			if _, warm := servedOf(r).List(); !warm[len(warm)-1] {
				t.Fatalf("the run after the refill was not served warm")
			}
		})
	}
}

// TestWarmFaultFallsBackToCold breaks the warm container a run has just
// taken, before the program reaches it: the run must still answer, from a
// cold container.
func TestWarmFaultFallsBackToCold(t *testing.T) {
	r, cli := newRunner(t, poolConfig(1, "python"))
	rec := servedOf(r)
	r.onRun = func(id string, warm bool) {
		rec.Add(id, warm)
		if warm {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
				t.Errorf("kill: %v", err)
			}
		}
	}
	waitWarm(t, r, "python", 1)
	res := run(t, r, sandboxtest.Req("python", "print(2**64)"))
	if res.Stdout != "18446744073709551616\n" || res.ExitCode != 0 {
		t.Fatalf("run: %+v", res)
	}
	if _, warm := rec.List(); !reflect.DeepEqual(warm, []bool{true, false}) {
		t.Fatalf("runs served warm=%v, want a broken warm one then a cold one", warm)
	}
}

// TestCrashedServerPoolRemoved kills a server with a full pool (a helper
// process, see TestMain) with SIGKILL: its warm containers must stop by
// themselves, and the next codeexec must remove them at start.
func TestCrashedServerPoolRemoved(t *testing.T) {
	cli := engine(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("the helper said nothing: %v", err)
	}
	instance := strings.TrimSpace(strings.TrimPrefix(line, "instance "))
	noteInstance(instance)
	if n := instanceContainers(t, cli, instance); n < 2 {
		t.Fatalf("the helper has %d containers, want its pool of 2", n)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	list := func() []container.Summary {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelInstance+"="+instance)})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	f := make(client.Filters).Add("type", "container").Add("event", "die").Add("label", LabelInstance+"="+instance)
	running := awaitEngine(t, cli, f, 2*time.Minute, func(context.Context) []string {
		var ids []string
		for _, c := range list() {
			if c.State == container.StateRunning {
				ids = append(ids, c.ID)
			}
		}
		return ids
	})
	if len(running) > 0 {
		t.Fatalf("%d warm containers of the crashed server still run two minutes later", len(running))
	}
	newRunner(t, Config{Languages: []string{"python"}})
	if left := list(); len(left) != 0 {
		t.Fatalf("New left %d containers of the crashed server", len(left))
	}
}

const crashHelperEnv = "CODE_EXEC_DOCKER_TEST_CRASH_HELPER"

// crashHelper is a server with a full pool that waits to be killed.
func crashHelper() {
	r, err := New(context.Background(), Config{Image: testImage(), Runtime: testRuntime(), PoolSize: 2, PoolLimits: sandboxtest.DefaultLimits(), Languages: []string{"python"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash helper:", err)
		os.Exit(1)
	}
	if err := r.pool.Wait(context.Background(), func(st warmpool.Stats) bool { return st.Ready["python"] >= 2 }); err != nil {
		fmt.Fprintln(os.Stderr, "crash helper:", err)
		os.Exit(1)
	}
	fmt.Println("instance", r.instance)
	select {}
}

func TestIsLeftover(t *testing.T) {
	now := time.Now()
	future := fmt.Sprint(now.Add(time.Hour).Unix())
	past := fmt.Sprint(now.Add(-time.Minute).Unix())
	labels := func(role, deadline, instance string) map[string]string {
		return map[string]string{LabelManaged: "true", LabelRole: role, LabelDeadline: deadline, LabelInstance: instance}
	}
	cases := []struct {
		name    string
		labels  map[string]string
		state   container.ContainerState
		age     time.Duration
		removed bool
	}{
		{"run before its deadline", labels(roleRun, future, "other"), container.StateExited, time.Hour, false},
		{"run after its deadline", labels(roleRun, past, "other"), container.StateRunning, time.Hour, true},
		{"no deadline", labels(roleRun, "", "other"), container.StateRunning, 0, true},
		{"warm container of a live server", labels(rolePool, future, "other"), container.StateRunning, time.Hour, false},
		{"pool container being started", labels(rolePool, future, "other"), container.StateCreated, time.Second, false},
		{"pool container never started", labels(rolePool, future, "other"), container.StateCreated, time.Hour, true},
		{"stopped pool container", labels(rolePool, future, "other"), container.StateExited, time.Second, true},
		{"own stopped pool container", labels(rolePool, future, "self"), container.StateExited, time.Second, false},
		{"pool container after its deadline", labels(rolePool, past, "other"), container.StateRunning, time.Hour, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := isLeftover(c.labels, c.state, now.Add(-c.age), "self", owners{}, now); got != c.removed {
				t.Fatalf("isLeftover = %v, want %v", got, c.removed)
			}
		})
	}
}
