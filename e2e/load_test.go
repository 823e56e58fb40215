package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// The load tests send loadCalls calls, loadConcurrency at a time, to a
// server that runs at most loadLimit at once, and check that every call is
// answered exactly once with its own output, and that the server ends up
// where it started: no process, container or directory left, memory and
// threads back near their idle level. They check counts, never durations.
const (
	loadCalls       = 500
	loadConcurrency = 32
	loadLimit       = 4
)

// TestLoad drives process mode over stdio (desktop clients) and streamable
// HTTP, and docker mode over streamable HTTP (gateways).
func TestLoad(t *testing.T) {
	sandboxtest.SkipShort(t, "the load test sends 500 calls per mode")
	t.Parallel()
	for _, c := range []struct {
		name, mode, transport string
	}{
		{"process/stdio", "process", stdio},
		{"process/http", "process", http_},
		{"docker/http", "docker", http_},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var cli *client.Client
			extra := map[string]string{"CODE_EXEC_SANDBOX": c.mode, "CODE_EXEC_MAX_CONCURRENCY": strconv.Itoa(loadLimit), "CODE_EXEC_LOG_LEVEL": "info"}
			if c.mode == "docker" {
				cli = dockerEngine(t)
			}
			env := serverEnv(t, extra)
			sessions, s := loadSessions(t, c.transport, env)
			pid := s.cmd.Process.Pid
			instance := ""
			if c.mode == "docker" {
				instance = logField(s.stderr.String(), "docker sandbox ready", "instance")
				if instance == "" {
					t.Fatalf("the docker-mode server did not log its instance id")
				}
			}

			// Processes of the server, sampled while the load runs.
			seen := newProcSampler(pid)
			defer seen.stop()

			// A warm-up burst at full concurrency brings connection and
			// worker pools to their steady state before the idle figures.
			// Its figures are read once no sandbox process is left (the
			// runs are over), at the same point as after each round.
			runLoad(t, sessions, c.mode, "warm", loadConcurrency, 5*time.Minute)
			waitNoDescendants(t, pid, time.Minute)
			idle := readProcStatus(t, pid)

			var rounds []procStatus
			for round := range 2 {
				runLoad(t, sessions, c.mode, "r"+strconv.Itoa(round), loadCalls/2, 10*time.Minute)
				waitNoDescendants(t, pid, time.Minute)
				rounds = append(rounds, readProcStatus(t, pid))
			}
			t.Logf("%s: idle RSS %d kB, %d threads; after %d calls RSS %d kB, %d threads; after %d calls RSS %d kB, %d threads; %d sandbox processes seen",
				c.name, idle.rssKB, idle.threads, loadCalls/2, rounds[0].rssKB, rounds[0].threads, loadCalls, rounds[1].rssKB, rounds[1].threads, seen.count())
			if limit := 2*idle.rssKB + 20<<10; rounds[1].rssKB > limit {
				t.Errorf("the server's RSS is %d kB after the load, more than 2 × its idle %d kB + 20 MB", rounds[1].rssKB, idle.rssKB)
			}
			if rounds[1].threads > rounds[0].threads+8 {
				t.Errorf("the server's threads keep growing: %d idle, %d after %d calls, %d after %d", idle.threads, rounds[0].threads, loadCalls/2, rounds[1].threads, loadCalls)
			}
			if c.mode == "process" && seen.count() == 0 {
				t.Errorf("no sandbox process of the server was ever seen: the sampler does not work")
			}

			stopLoadServer(t, s, sessions)
			seen.stop()
			if left := seen.alive(); len(left) > 0 {
				t.Errorf("processes of the server outlived it: %v", left)
			}
			assertDirEmpty(t, env["CODE_EXEC_WORK_DIR"])
			if cli != nil {
				if left := containersOf(t, cli, instance); len(left) > 0 {
					t.Errorf("%d containers of the server are left on the engine: %v", len(left), describeContainers(left))
				}
			}
		})
	}
}

// loadSessions starts the server and opens the sessions the load uses:
// stdio has exactly one; over HTTP, four clients share the load, as a
// gateway's users would.
func loadSessions(t *testing.T, transport string, env map[string]string) ([]*mcp.ClientSession, *server) {
	t.Helper()
	cs, s := connect(t, transport, env, connectOpts{})
	sessions := []*mcp.ClientSession{cs}
	if transport != stdio {
		for range 3 {
			sessions = append(sessions, dial(t, s, connectOpts{}))
		}
	}
	return sessions, s
}

// stopLoadServer ends the server as its client would (stdio: close stdin;
// HTTP: SIGTERM) and checks that it exits 0.
func stopLoadServer(t *testing.T, s *server, sessions []*mcp.ClientSession) {
	t.Helper()
	if s.transport == stdio {
		if err := sessions[0].Close(); err != nil {
			t.Logf("closing the stdio session: %v", err)
		}
		if st := s.cmd.ProcessState; st == nil || st.ExitCode() != 0 {
			t.Errorf("the stdio server did not exit 0 when its client closed: %v", st)
		}
		return
	}
	for _, cs := range sessions {
		_ = cs.Close()
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.waitExit(t, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// loadProgram is the program of call i: it prints token once, in one of the
// three languages.
func loadProgram(i int, token string) map[string]any {
	switch i % 3 {
	case 0:
		return map[string]any{"language": "python", "code": fmt.Sprintf("print(%q)", token)}
	case 1:
		return map[string]any{"language": "bash", "code": "echo " + token}
	default:
		return map[string]any{"language": "javascript", "code": fmt.Sprintf("console.log(%q)", token)}
	}
}

var tokenRE = regexp.MustCompile(`tok-[0-9]+-[a-z0-9]+-[0-9]+`)

// runLoad sends n calls, conc at a time, spread over sessions, each
// printing a unique token, and checks that every call is answered, in
// sandbox mode, with its own token and no other, and every token comes back
// exactly once. The whole load must end within limit (a bound against
// hangs, not a performance assertion).
func runLoad(t *testing.T, sessions []*mcp.ClientSession, mode, tag string, n int, limit time.Duration) {
	t.Helper()
	prefix := "tok-" + strings.ReplaceAll(marker(), ".", "") + "-" + tag + "-" // unique per load
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()

	type answer struct {
		stdout, text string
		isError      bool
		sandbox      string
		exit         int
		err          error
	}
	answers := make([]answer, n)
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range min(loadConcurrency, n) {
		cs := sessions[w%len(sessions)]
		wg.Go(func() {
			for i := range work {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: loadProgram(i, prefix+strconv.Itoa(i))})
				a := answer{err: err}
				if err == nil {
					a.isError, a.text = res.IsError, text(res)
					var out execResult
					if b, err := jsonMarshal(res.StructuredContent); err == nil && jsonUnmarshal(b, &out) == nil {
						a.stdout, a.sandbox, a.exit = out.Stdout, out.Sandbox, out.ExitCode
					}
				}
				answers[i] = a
			}
		})
	}
feed:
	for i := range n {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)

	counts := map[string]int{}
	failed := 0
	for i, a := range answers {
		want := prefix + strconv.Itoa(i)
		switch {
		case a.err != nil:
			failed++
			if failed <= 5 {
				t.Errorf("call %d: %v", i, a.err)
			}
			continue
		case a.isError || a.exit != 0 || a.sandbox != mode || a.stdout != want+"\n":
			failed++
			if failed <= 5 {
				t.Errorf("call %d: isError=%v exit=%d sandbox=%q stdout=%q text=%q; want stdout %q from the %s sandbox", i, a.isError, a.exit, a.sandbox, a.stdout, abbrev(a.text), want+"\n", mode)
			}
		}
		for _, tok := range tokenRE.FindAllString(a.stdout, -1) {
			counts[tok]++
		}
		for _, tok := range tokenRE.FindAllString(a.text, -1) {
			if tok != want {
				t.Errorf("call %d: the text content holds another call's token %s: %q", i, tok, abbrev(a.text))
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d calls failed (tag %s)", failed, n, tag)
	}
	for i := range n {
		tok := prefix + strconv.Itoa(i)
		if counts[tok] != 1 {
			t.Errorf("token of call %d came back %d times, want exactly once", i, counts[tok])
		}
		delete(counts, tok)
	}
	for tok, c := range counts {
		t.Errorf("token %s, which no call printed, came back %d times", tok, c)
	}
	t.Logf("%s load %s: %d calls at concurrency %d answered in %s (%.1f calls/s)", mode, tag, n, min(loadConcurrency, n), elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
}

// procStatus is what /proc/<pid>/status says of a process's footprint.
type procStatus struct {
	rssKB   int
	threads int
}

func readProcStatus(t *testing.T, pid int) procStatus {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading the server's status: %v", err)
	}
	var st procStatus
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			st.rssKB, _ = strconv.Atoi(f[0])
		case "Threads":
			st.threads, _ = strconv.Atoi(f[0])
		}
	}
	if st.rssKB == 0 || st.threads == 0 {
		t.Fatalf("/proc/%d/status has no VmRSS or Threads:\n%s", pid, b)
	}
	return st
}

// procID names a process for good: a pid and its start time.
type procID struct {
	pid   int
	start string
}

func (p procID) String() string { return strconv.Itoa(p.pid) }

// procStat reads the parent pid, the state and the start time of a process.
func procStat(pid int) (ppid int, state, start string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, "", "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0], f[19], true
}

// descendants lists the live (not zombie) processes below pid.
func descendants(pid int) []procID {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	info := map[int]procID{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, start, ok := procStat(p)
		if !ok || state == "Z" || state == "X" {
			continue
		}
		children[ppid] = append(children[ppid], p)
		info[p] = procID{p, start}
	}
	var out []procID
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if isPreparedSupervisor(c) {
				// The next run's, started ahead of demand
				// (CODE_EXEC_PROCESS_POOL_SIZE), with its exec stage.
				continue
			}
			out = append(out, info[c])
			queue = append(queue, c)
		}
	}
	return out
}

// isPreparedSupervisor reports whether pid is a process-mode supervisor
// waiting for its run: started ahead of demand (CODE_EXEC_PROCESS_POOL_SIZE),
// it is named codeexec-ready until its run comes.
func isPreparedSupervisor(pid int) bool {
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(comm)) == "codeexec-ready"
}

// preparedSupervisors counts the prepared supervisors right below pid.
func preparedSupervisors(pid int) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, state, _, ok := procStat(p); ok && ppid == pid && state != "Z" && isPreparedSupervisor(p) {
			n++
		}
	}
	return n
}

// procAlive reports whether the process p still runs.
func procAlive(p procID) bool {
	_, state, start, ok := procStat(p.pid)
	return ok && start == p.start && state != "Z" && state != "X"
}

// waitNoDescendants waits up to d until no process runs below pid.
func waitNoDescendants(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := descendants(pid)
		// The server prepares runs ahead, per language, more while
		// requests find none (up to twice the CPUs each, see
		// docs/modes.md): more waiting supervisors would be leftovers.
		if len(left) == 0 && preparedSupervisors(pid) <= len(sandbox.LanguageNames())*max(1, 2*runtime.NumCPU()) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes still run below the server %s after its runs ended: %s", len(left), d, describeProcs(left))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describeProcs(ps []procID) string {
	var b strings.Builder
	for _, p := range ps {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		fmt.Fprintf(&b, "\n  %d %q", p.pid, strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return b.String()
}

// procSampler records every process seen below a pid until stop, so that
// their fate can be checked after the pid is gone (its orphans are
// re-parented and no longer below it).
type procSampler struct {
	mu       sync.Mutex
	seen     map[procID]struct{}
	done     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

func newProcSampler(pid int) *procSampler {
	s := &procSampler{seen: map[procID]struct{}{}, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			ps := descendants(pid)
			s.mu.Lock()
			for _, p := range ps {
				s.seen[p] = struct{}{}
			}
			s.mu.Unlock()
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *procSampler) stop() {
	s.stopOnce.Do(func() { close(s.done) })
	<-s.stopped
}

func (s *procSampler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// alive lists the sampled processes that still run.
func (s *procSampler) alive() []procID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []procID
	for p := range s.seen {
		if procAlive(p) {
			out = append(out, p)
		}
	}
	return out
}

// assertDirEmpty checks that a server left nothing in its work directory.
func assertDirEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading the work directory: %v", err)
	}
	if len(entries) > 0 {
		var all []string
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
			all = append(all, p)
			return nil
		})
		t.Errorf("the server left %d entries in its work directory: %q", len(entries), all)
	}
}

// dockerEngine returns a client of the engine the docker-mode server will
// use, or skips the test when none answers (fails with
// CODE_EXEC_REQUIRE_DOCKER=1); it skips under -short.
func dockerEngine(t *testing.T) *client.Client {
	t.Helper()
	sandboxtest.SkipShort(t, sandboxtest.NeedsDocker)
	skip := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CODE_EXEC_REQUIRE_DOCKER") == "1" {
			t.Fatalf("%s (CODE_EXEC_REQUIRE_DOCKER=1)", msg)
		}
		t.Skipf("%s; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", msg)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		skip("docker client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := docker.Ping(ctx, cli); err != nil {
		skip("docker mode cannot run: %v", err)
	}
	img := os.Getenv("CODE_EXEC_DOCKER_IMAGE")
	if img == "" {
		img = "codeexec-sandbox:latest"
	}
	if _, err := cli.ImageInspect(ctx, img); err != nil {
		skip("the sandbox image %s is missing (build it with docker/build-sandbox-image.sh): %v", img, err)
	}
	return cli
}

// containersOf lists the containers (any state) that one docker-mode
// server created.
func containersOf(t *testing.T, cli *client.Client, instance string) []container.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", "io.codeexec.instance="+instance),
	})
	if err != nil {
		t.Fatalf("listing the containers of instance %s: %v", instance, err)
	}
	return l.Items
}

func describeContainers(cs []container.Summary) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "\n  %.12s role=%s state=%s owner=%s", c.ID, c.Labels["io.codeexec.role"], c.State, c.Labels["io.codeexec.owner"])
	}
	return b.String()
}
