package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"golang.org/x/tools/txtar"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/docker/image"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// These tests run against the real Docker Engine named by DOCKER_HOST (or
// the local socket) and the image built by docker/build-sandbox-image.sh.
// Without an engine or the image they skip, unless CODE_EXEC_REQUIRE_DOCKER=1,
// in which case they fail.

// TestMain checks, after every test, that no container of a Runner these
// tests made is left on the engine: one of this process (its owner label) or
// of an instance a test noted (the crash helper's, the fake leftovers').
// (Other programs, such as the e2e tests, may be using the same engine at
// the same time: their containers are not looked at.)
func TestMain(m *testing.M) {
	if os.Getenv(crashHelperEnv) == "1" {
		crashHelper()
	}
	if os.Getenv(pingHelperEnv) == "1" {
		pingHelper()
	}
	code := m.Run()
	if cli, ok := engineForMain(); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelManaged+"=true")})
		cancel()
		_ = cli.Close()
		self, _ := currentOwner()
		if err == nil {
			for _, c := range list.Items {
				if c.Labels[LabelOwner] != self.String() && !isTestInstance(c.Labels[LabelInstance]) {
					continue // another program's
				}
				fmt.Fprintf(os.Stderr, "left on the engine after the tests: container %s (%s) labels %v\n", shortID(c.ID), c.State, c.Labels)
				code = 1
			}
		}
	}
	os.Exit(code)
}

var (
	testInstancesMu sync.Mutex
	testInstances   = map[string]bool{"crashed-test": true, "live-test": true}
)

// noteInstance records a Runner id made by these tests.
func noteInstance(id string) {
	testInstancesMu.Lock()
	defer testInstancesMu.Unlock()
	testInstances[id] = true
}

func isTestInstance(id string) bool {
	testInstancesMu.Lock()
	defer testInstancesMu.Unlock()
	return testInstances[id]
}

func engineForMain() (*client.Client, bool) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Ping(ctx, cli); err != nil {
		_ = cli.Close()
		return nil, false
	}
	return cli, true
}

// testRuntime is the OCI runtime the tests use: CODE_EXEC_DOCKER_RUNTIME
// (CI runs the docker tests again with runsc), or the engine's default.
func testRuntime() string { return os.Getenv("CODE_EXEC_DOCKER_RUNTIME") }

func testImage() string {
	if img := os.Getenv("CODE_EXEC_DOCKER_IMAGE"); img != "" {
		return img
	}
	return DefaultImage
}

// skipOrFail skips the test, or fails it when CODE_EXEC_REQUIRE_DOCKER=1.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CODE_EXEC_REQUIRE_DOCKER") == "1" {
		t.Fatalf("%s (CODE_EXEC_REQUIRE_DOCKER=1)", msg)
	}
	t.Skipf("%s; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", msg)
}

// engine returns a client of the test engine, or skips (fails) when no
// engine answers or the image is missing; it skips under -short.
func engine(t testing.TB) *client.Client {
	t.Helper()
	sandboxtest.SkipShort(t, sandboxtest.NeedsDocker)
	cli, err := client.New(client.FromEnv)
	if err != nil {
		skipOrFail(t, "docker client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Ping(ctx, cli); err != nil {
		skipOrFail(t, "docker mode cannot run: %v", err)
	}
	if _, err := cli.ImageInspect(ctx, testImage()); err != nil {
		skipOrFail(t, "the sandbox image %s is missing (build it with %s): %v", testImage(), BuildCommand, err)
	}
	return cli
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newRunner connects a Runner for the test and closes it at the end, then
// checks that it left no container behind.
func newRunner(t testing.TB, cfg Config) (*Runner, *client.Client) {
	t.Helper()
	return newRunnerWithin(t, cfg, 2*time.Minute)
}

// newRunnerWithin is newRunner, giving New up to wait to start (a start
// that builds its image takes minutes).
func newRunnerWithin(t testing.TB, cfg Config, wait time.Duration) (*Runner, *client.Client) {
	t.Helper()
	cli := engine(t)
	if cfg.Image == "" {
		cfg.Image = testImage()
	}
	if cfg.Runtime == "" {
		cfg.Runtime = testRuntime()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	noteInstance(r.instance)
	r.onRun = servedBy.New(r).Add
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := instanceContainers(t, cli, r.instance); n > 0 {
			t.Errorf("%d containers of runner %s are left on the engine", n, r.instance)
		}
	})
	return r, cli
}

// instanceContainers counts the containers of one Runner on the engine.
func instanceContainers(t testing.TB, cli *client.Client, instance string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelInstance+"="+instance)})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	return len(list.Items)
}

// labelledContainers returns the ids of the containers on the engine that
// carry every one of labels (key=value).
func labelledContainers(ctx context.Context, t testing.TB, cli *client.Client, labels ...string) []string {
	t.Helper()
	f := make(client.Filters)
	for _, l := range labels {
		f.Add("label", l)
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// servedBy records which containers served the runs of each test Runner;
// newRunner makes a Runner's record before the Runner is shared.
var servedBy sandboxtest.ServedBy[*Runner]

func servedOf(r *Runner) *sandboxtest.Served { return servedBy.Of(r) }

// alive reports processes with marker on the host's /proc (the engine is
// local, so container processes are visible there), and containers that
// served a run of the runner and are still on the engine after 10 s (they
// are removed in the background once the run has returned; their
// processes are killed before it returns).
func alive(r *Runner, cli *client.Client) func(t *testing.T, marker string) bool {
	return func(t *testing.T, marker string) bool {
		t.Helper()
		return sandboxtest.ProcessesAlive(t, marker) || len(lingering(t, r, cli, time.Minute)) > 0
	}
}

// lingering returns the containers that served runs of r and are still on
// the engine after waiting up to wait for them to go (they are removed in
// the background once the run has returned). It waits on the engine's
// "destroy" events, replayed from before it looks, not on a poll.
func lingering(t testing.TB, r *Runner, cli *client.Client, wait time.Duration) []string {
	t.Helper()
	ids, _ := servedOf(r).List()
	if len(ids) == 0 {
		return nil
	}
	f := make(client.Filters).Add("type", "container").Add("event", "destroy")
	for _, id := range ids {
		f.Add("container", id)
	}
	return awaitEngine(t, cli, f, wait, func(ctx context.Context) []string {
		var left []string
		for _, id := range ids {
			_, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
			if err == nil {
				left = append(left, id)
			} else if !cerrdefs.IsNotFound(err) {
				t.Fatalf("inspect: %v", err)
			}
		}
		return left
	})
}

// awaitEngine waits until every container that pending lists has had an
// event that f selects, or until wait has passed, and returns those that
// have not. It subscribes to the engine's events from a second before it
// calls pending, so that no event between the look and the subscription
// is missed.
func awaitEngine(t testing.TB, cli *client.Client, f client.Filters, wait time.Duration, pending func(context.Context) []string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	since := strconv.FormatInt(time.Now().Add(-time.Second).Unix(), 10)
	ev := cli.Events(ctx, client.EventsListOptions{Since: since, Filters: f})
	left := map[string]bool{}
	for _, id := range pending(ctx) {
		left[id] = true
	}
	for len(left) > 0 {
		select {
		case m := <-ev.Messages:
			delete(left, m.Actor.ID)
		case err := <-ev.Err:
			if ctx.Err() == nil {
				t.Fatalf("the engine's events: %v", err)
			}
			var ids []string
			for id := range left {
				ids = append(ids, id)
			}
			return ids
		}
	}
	return nil
}

func run(t *testing.T, r *Runner, req sandbox.Request) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.Run(ctx, req)
	if err != nil {
		t.Fatalf("Run(%s): %v", req.Language, err)
	}
	return res
}

func TestSuite(t *testing.T) {
	r, cli := newRunner(t, Config{})
	sandboxtest.RunSuite(t, r, sandboxtest.Options{Mode: sandbox.ModeDocker, ScrubsEnv: true, Alive: alive(r, cli)})
}

func TestCapabilities(t *testing.T) {
	r, _ := newRunner(t, Config{Languages: []string{"python", "javascript"}})
	caps := r.Capabilities()
	if caps.Mode != sandbox.ModeDocker {
		t.Fatalf("Mode = %q", caps.Mode)
	}
	for _, name := range []string{"python", "javascript"} {
		st, ok := caps.Language(name)
		if !ok || !st.Available || st.Version == "" || !strings.HasPrefix(st.Interpreter, "/") {
			t.Errorf("language %s: %+v, want available with a version and an absolute interpreter path", name, st)
		}
	}
	if st, _ := caps.Language("bash"); st.Available || !strings.Contains(st.Reason, "disabled") {
		t.Errorf("bash: %+v, want unavailable because disabled", st)
	}
	want := map[string]bool{
		"network": true, "read-only root filesystem": true, "size-capped /tmp": true, "non-root user": true,
		"capabilities dropped": true, "no-new-privileges": true, "memory limit": false, "pids limit": false,
		"cpu limit": false, "open files limit": true, "runtime": true, "engine": true,
		// Where the engine applies seccomp, so must every runtime: under
		// gVisor, runsc --oci-seccomp (as docker/install-gvisor.sh
		// registers it), or a program can make a user namespace there.
		"seccomp": r.engine.seccomp,
	}
	for _, p := range caps.Protections {
		if mustBeActive, ok := want[p.Name]; ok {
			delete(want, p.Name)
			if mustBeActive && !p.Active {
				t.Errorf("protection %q is not active: %s", p.Name, p.Detail)
			}
			if p.Detail == "" {
				t.Errorf("protection %q has no detail", p.Name)
			}
		}
	}
	for name := range want {
		t.Errorf("protection %q is not listed", name)
	}
	if want := (sandbox.Isolation{Network: true, Filesystem: true, Identity: true, Environment: true, Processes: true}); caps.Isolation != want {
		t.Errorf("Isolation = %+v, want every boundary held (%+v)", caps.Isolation, want)
	}

	ctx := context.Background()
	if _, err := r.Run(ctx, sandboxtest.Req("bash", "echo hi")); !errors.Is(err, sandbox.ErrLanguageUnavailable) {
		t.Errorf("Run(bash) with bash disabled: err = %v, want ErrLanguageUnavailable", err)
	}
	if _, err := r.Run(ctx, sandboxtest.Req("cobol", "x")); !errors.Is(err, sandbox.ErrUnknownLanguage) {
		t.Errorf("Run(cobol): err = %v, want ErrUnknownLanguage", err)
	}
}

func TestNewErrors(t *testing.T) {
	engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("missing image of codeexec's own, with CODE_EXEC_DOCKER_PULL=never, names the build command of its profile", func(t *testing.T) {
		// A made-up name that New takes for the data-science image: the real
		// ones are never touched.
		img := "codeexec-test-" + newInstanceID() + ":datascience"
		_, err := New(ctx, Config{Image: img, Pull: image.PullNever, builds: map[string]string{img: image.TargetDataScience}})
		want := "from a checkout of codeexec (github.com/codeexec/codeexec): `" + BuildCommand + " --profile datascience --image " + img + "`"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "CODE_EXEC_DOCKER_PULL=never") {
			t.Fatalf("err = %v, want a message that says CODE_EXEC_DOCKER_PULL=never and %s", err, want)
		}
	})
	t.Run("unknown runtime", func(t *testing.T) {
		_, err := New(ctx, Config{Image: testImage(), Runtime: "codeexec-no-such-runtime"})
		if err == nil || !strings.Contains(err.Error(), "codeexec-no-such-runtime") || !strings.Contains(err.Error(), "CODE_EXEC_DOCKER_RUNTIME") {
			t.Fatalf("err = %v, want a message naming the runtime and CODE_EXEC_DOCKER_RUNTIME", err)
		}
	})
	// An engine that does not answer: TestEngineUnreachableSaysWhy.
}

// TestLeftoversRemoved plays a crashed codeexec: its containers carry the
// label and an expired deadline. New must remove them, and leave alone a
// container of a live codeexec (deadline ahead) and a container that is not
// codeexec's at all.
func TestLeftoversRemoved(t *testing.T) {
	cli := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	past := fmt.Sprint(time.Now().Add(-time.Minute).Unix())
	future := fmt.Sprint(time.Now().Add(time.Hour).Unix())
	mk := func(labels map[string]string, startIt bool) string {
		t.Helper()
		c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config: &container.Config{Image: testImage(), Entrypoint: []string{"sleep", "300"}, Labels: labels},
			HostConfig: &container.HostConfig{
				NetworkMode: network.NetworkNone, ReadonlyRootfs: true, CapDrop: []string{"ALL"},
				LogConfig: container.LogConfig{Type: "none"},
			},
		})
		if err != nil {
			t.Fatalf("creating a test container: %v", err)
		}
		t.Cleanup(func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ccancel()
			_, _ = cli.ContainerRemove(cctx, c.ID, client.ContainerRemoveOptions{Force: true})
		})
		if startIt {
			if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
				t.Fatalf("starting a test container: %v", err)
			}
		}
		return c.ID
	}
	crashedRunning := mk(map[string]string{LabelManaged: "true", LabelInstance: "crashed-test", LabelDeadline: past, LabelRole: "run"}, true)
	crashedCreated := mk(map[string]string{LabelManaged: "true", LabelInstance: "crashed-test", LabelRole: "run"}, false)
	liveOther := mk(map[string]string{LabelManaged: "true", LabelInstance: "live-test", LabelDeadline: future, LabelRole: "run"}, false)
	notOurs := mk(map[string]string{"io.example.owner": "someone-else", LabelDeadline: past}, true)

	r, _ := newRunner(t, Config{})
	_ = r
	exists := func(id string) bool {
		_, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Fatalf("inspect: %v", err)
		}
		return err == nil
	}
	if exists(crashedRunning) || exists(crashedCreated) {
		t.Errorf("New left a crashed codeexec's containers on the engine")
	}
	if !exists(liveOther) {
		t.Errorf("New removed a container whose deadline has not passed (it may belong to a live codeexec)")
	}
	if !exists(notOurs) {
		t.Errorf("New removed a container without the %s label", LabelManaged)
	}
}

func TestCloseStopsRuns(t *testing.T) {
	r, cli := newRunner(t, Config{})
	marker := sandboxtest.Marker()
	done := make(chan error, 1)
	req := sandboxtest.Req("bash", "echo started; sleep "+marker)
	started := sandboxtest.Started(&req)
	go func() {
		_, err := r.Run(context.Background(), req)
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the run ended before Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, sandbox.ErrClosed) {
			t.Fatalf("Run during Close returned %v, want ErrClosed", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("Run did not return after Close")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := r.Run(context.Background(), sandboxtest.Req("bash", "true")); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("Run after Close returned %v, want ErrClosed", err)
	}
	if sandboxtest.ProcessesAlive(t, marker) || instanceContainers(t, cli, r.instance) > 0 {
		t.Fatalf("Close left the run's container or processes behind")
	}
}

// bridgeAddr returns this host's address on the engine's default bridge,
// read from the engine (or from the bridge interface the engine names).
func bridgeAddr(t *testing.T, cli *client.Client) net.IP {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nw, err := cli.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		t.Skipf("the engine has no default bridge network: %v", err)
	}
	for _, c := range nw.Network.IPAM.Config {
		if c.Gateway.IsValid() && c.Gateway.Is4() {
			return net.IP(c.Gateway.AsSlice())
		}
	}
	name := nw.Network.Options["com.docker.network.bridge.name"]
	if name == "" {
		name = "docker0"
	}
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		t.Skipf("no bridge interface %s on this host (is the engine remote?): %v", name, err)
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP
		}
	}
	t.Skipf("the bridge interface %s has no IPv4 address", name)
	return nil
}

// inContainerProcesses reports whether a process with marker in its command
// line runs in the container id (false once the container is gone). Each
// look is bounded: under gVisor an exec's output stream sometimes never
// ends, so a look that times out is tried again, three times at most.
func inContainerProcesses(t testing.TB, cli *client.Client, id, marker string) bool {
	t.Helper()
	for range 3 {
		seen, done := lookInContainer(cli, id, marker)
		if done {
			return seen
		}
	}
	t.Fatalf("three looks at the processes of container %s timed out", id)
	return false
}

// lookInContainer lists the command lines in container id once; done is
// false when the listing did not finish within 20 s.
func lookInContainer(cli *client.Client, id, marker string) (seen, done bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ex, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{
		AttachStdout: true,
		Cmd:          []string{"/bin/sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$f" 2>/dev/null; echo; done`},
	})
	if err != nil {
		return false, true // not running, or gone
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return false, true
	}
	defer att.Close()
	if dl, ok := ctx.Deadline(); ok && att.Conn != nil {
		_ = att.Conn.SetDeadline(dl)
	}
	var out strings.Builder
	if _, err := stdcopy.StdCopy(&out, io.Discard, att.Reader); err != nil && ctx.Err() != nil {
		return false, false
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, marker) && !strings.Contains(line, "/proc/[0-9]") {
			return true, true
		}
	}
	return false, true
}

// TestTrailerCountsAfterTheExit: by the time a run is read, the engine may
// have reported the container's exit and its stream may have ended (a
// container quick to stop, a busy server). The supervisor's trailer, which
// came on the stream before its end, still decides the result. Here every
// channel is ready before exchange looks, so each of its selects takes a
// random branch: 20 rounds try them all (one CI run saw "stopped from
// outside ... (exit status 0)" for a plain warm run).
func TestTrailerCountsAfterTheExit(t *testing.T) {
	r, _ := newRunner(t, Config{Languages: []string{"python"}})
	lim := sandboxtest.DefaultLimits()
	ctx := context.Background()
	for i := range 20 {
		s, err := r.start(ctx, r.runSpec("python", lim, roleRun, runDeadline(time.Now(), lim.Timeout), nil), "python")
		if err != nil {
			t.Fatal(err)
		}
		code := fmt.Sprintf("print(%d)", i)
		_, _ = io.Copy(s.attach.Conn, strings.NewReader(runproto.Header("python", len(code), 0, "")+code))
		_ = s.attach.CloseWrite()
		for _, c := range []chan struct{}{s.exitedC, s.readC} {
			select {
			case <-c:
			case <-time.After(time.Minute):
				t.Fatal("the container did not stop, or its stream did not end, within a minute")
			}
		}
		res, err, _ := r.exchange(ctx, s, strings.NewReader(""), lim, nil, nil, false)
		r.discard(s)
		if err != nil || res.ExitCode != 0 || res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Fatalf("round %d: %+v %v", i, res, err)
		}
	}
}

// A program that forges the end of its run (sig-forged-end: it looks for the
// nonce in PID 1's command line, environment and memory, writes forged
// trailers, and sleeps) runs on to its timeout, with either supervisor: the
// python one, whose nonce it cannot read, and the shell one of an image
// without python3, whose nonce it finds in PID 1's memory (only the end of
// the container's stream, the engine's exit status 0 and the last line of
// stderr end such a run).
func TestForgedEnd(t *testing.T) {
	ar, err := txtar.ParseFile("../testdata/attacks/sig-forged-end.txtar")
	if err != nil {
		t.Fatal(err)
	}
	var code string
	for _, f := range ar.Files {
		if f.Name == "main.py" {
			code = string(f.Data)
		}
	}
	r, _ := newRunner(t, Config{Languages: []string{"python"}})
	for _, sup := range []string{"python", "shell"} {
		t.Run(sup, func(t *testing.T) {
			if sup == "shell" {
				// As for an image without python3.
				r.relayPython = ""
			}
			req := sandboxtest.Req("python", code)
			req.Limits.Timeout = 3 * time.Second
			res := run(t, r, req)
			if !res.TimedOut || res.ExitCode != 137 {
				t.Fatalf("timed out %v, exit %d (stdout %q): a forged end ended the run", res.TimedOut, res.ExitCode, res.Stdout)
			}
			// What of PID 1 the program can read.
			look := run(t, r, sandboxtest.Req("python", `import re
n = 0
try:
    with open("/proc/1/maps") as maps, open("/proc/1/mem", "rb", 0) as mem:
        for line in maps:
            a, b = (int(x, 16) for x in line.split()[0].split("-"))
            try:
                mem.seek(a)
                n += len(re.findall(rb"@@codeexec-end-[0-9a-f]{32}", mem.read(b - a)))
            except (OSError, OverflowError, ValueError):
                pass
    print("memory read, nonces", n)
except OSError as e:
    print("memory refused:", e.strerror)
`))
			switch {
			case sup == "python" && look.Stdout != "memory refused: Permission denied\n":
				t.Errorf("reading PID 1's memory: %q, want it refused", look.Stdout)
			case sup == "shell":
				// runc lets it (and it finds the nonce); gVisor does not.
				t.Logf("reading a shell PID 1's memory: %q", look.Stdout)
			}
			if res := run(t, r, sandboxtest.Req("python", "print(2**64)")); res.Stdout != "18446744073709551616\n" || res.ExitCode != 0 {
				t.Fatalf("a plain run after it: %+v", res)
			}
		})
	}
}
