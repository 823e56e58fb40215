package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// sessionContainers counts the session containers of a Runner on the engine.
func sessionContainers(t testing.TB, cli *client.Client, r *Runner) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).
		Add("label", LabelInstance+"="+r.instance).Add("label", LabelRole+"="+roleSession)})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	return len(list.Items)
}

func TestSessionSuite(t *testing.T) {
	r, cli := newRunner(t, Config{})
	t.Cleanup(func() {
		if n := sessionContainers(t, cli, r); n != 0 {
			t.Errorf("%d session containers left after the suite", n)
		}
	})
	opts := sandboxtest.SessionOptions{
		Mode: sandbox.ModeDocker, ScrubsEnv: true,
		// Every test of the suite holds a session of its own while the
		// close test runs: only a count of zero at the end would say
		// more, and newRunner's cleanup checks that.
		Gone: func(t *testing.T, dir string) bool { return dir == "/tmp" },
	}
	if testRuntime() == "runsc" {
		// gVisor's processes are not the host's: look inside the
		// session containers instead (none left: nothing alive).
		opts.Alive = func(t *testing.T, marker string) bool {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			list, err := cli.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).
				Add("label", LabelInstance+"="+r.instance).Add("label", LabelRole+"="+roleSession)})
			if err != nil {
				t.Fatalf("listing containers: %v", err)
			}
			for _, c := range list.Items {
				if inContainerProcesses(t, cli, c.ID, marker) {
					return true
				}
			}
			return false
		}
	}
	sandboxtest.RunSessionSuite(t, r.Sessions(), opts)
}

// A session's container is a run's: the same lockdown, with the role
// "session".
func TestSessionContainerLockdown(t *testing.T) {
	r, cli := newRunner(t, Config{Languages: []string{"python"}})
	s := sandboxtest.StartSession(t, r.Sessions(), "python")
	cs := s.(*containerSession)
	ctx := context.Background()
	got, err := cli.ContainerInspect(ctx, cs.c.id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host := got.Container.HostConfig
	want := r.hostConfig(containerLimits(sandboxtest.DefaultLimits()))
	if host.NetworkMode != want.NetworkMode || !host.ReadonlyRootfs || host.Resources.Memory != want.Resources.Memory ||
		len(host.CapDrop) != 1 || host.CapDrop[0] != "ALL" || host.Tmpfs["/tmp"] != want.Tmpfs["/tmp"] {
		t.Fatalf("session container's host config differs from a run's: %+v", host)
	}
	if role := got.Container.Config.Labels[LabelRole]; role != roleSession {
		t.Errorf("role label %q, want %q", role, roleSession)
	}
	// The target is a listener of this test, on the Docker bridge's own
	// address when there is one (reachable from a container on a bridge
	// network), never an address off this machine.
	ip := bridgeIP()
	if ip == "" {
		ip = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	res := sandboxtest.SessionCall(t, s, "python", fmt.Sprintf("import os, socket\nprint(os.getuid() != 0)\ntry:\n    socket.create_connection((%q, %d), timeout=1)\n    print('net')\nexcept OSError:\n    print('no net')", ip, l.Addr().(*net.TCPAddr).Port))
	if res.Stdout != "True\nno net\n" {
		t.Fatalf("stdout %q, want a non-root user without network", res.Stdout)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := sessionContainers(t, cli, r); n != 0 {
		t.Fatalf("%d session containers left after Close", n)
	}
}

// A driver killed by the memory limit loses the state; the files stay.
func TestSessionOOM(t *testing.T) {
	if testRuntime() == "runsc" {
		t.Skip("not checked under gVisor: the host's OOM killer kills gVisor's kernel along with the interpreter, so the session's container stops and its files are lost with its state; see docs/modes.md#runtimes")
	}
	r, _ := newRunner(t, Config{Languages: []string{"python"}})
	lim := sandboxtest.DefaultLimits()
	lim.MemoryBytes = 64 << 20
	s, err := r.Sessions().Start(context.Background(), sessionSpec("python", lim))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sandboxtest.CheckSessionOOM(t, s)
}

func sessionSpec(lang string, lim sandbox.Limits) sessions.Spec {
	return sessions.Spec{ID: "ses_test", Language: lang, Limits: lim, Deadline: time.Now().Add(time.Hour)}
}

// A call that times out has every process of the container killed, the
// files helper too: the next call's files and artifacts go through a new one,
// and what earlier calls made is not reported again.
func TestSessionArtifactsAfterAKill(t *testing.T) {
	r, _ := newRunner(t, Config{Languages: []string{"python"}})
	s := sandboxtest.StartSession(t, r.Sessions(), "python")
	call := func(code string, timeout time.Duration, files ...artifacts.Input) *sandbox.Result {
		t.Helper()
		req := sandboxtest.Req("python", code)
		req.Files, req.Artifacts = files, &artifacts.Options{}
		if timeout > 0 {
			req.Limits.Timeout = timeout
		}
		res, err := s.Exec(context.Background(), req)
		if err != nil {
			t.Fatalf("call %q: %v", code, err)
		}
		return res
	}
	paths := func(res *sandbox.Result) []string {
		var out []string
		for _, a := range res.Artifacts.Artifacts {
			out = append(out, a.Path)
		}
		return out
	}
	if got := paths(call("open('a.txt', 'w').write('a')", 0, artifacts.Input{Path: "in.txt", Data: []byte("in")})); !slices.Equal(got, []string{"a.txt"}) {
		t.Fatalf("first call: %v", got)
	}
	res := call("while True: pass", 500*time.Millisecond)
	if !res.TimedOut || !res.StateLost {
		t.Fatalf("a timeout: timed out %v, state lost %v", res.TimedOut, res.StateLost)
	}
	if got := paths(res); len(got) != 0 {
		t.Fatalf("a call that wrote nothing: %v", got)
	}
	res = call("print(open('in2.txt').read()); open('b.txt', 'w').write('b')", 0, artifacts.Input{Path: "in2.txt", Data: []byte("in2")})
	if got := paths(res); res.Stdout != "in2\n" || !slices.Equal(got, []string{"b.txt"}) {
		t.Fatalf("after the kill: stdout %q artifacts %v (note %q); want in2 and b.txt", res.Stdout, got, res.Artifacts.Note())
	}
	// A folder the code made read-only refuses the file, in a sentence;
	// the helper goes on with the next call's files.
	call("import os; os.mkdir('ro'); os.chmod('ro', 0o555)", 0)
	req := sandboxtest.Req("python", "print('ran')")
	req.Files = []artifacts.Input{{Path: "ro/x.txt", Data: []byte("x")}, {Path: "later.txt", Data: []byte("y")}}
	if _, err := s.Exec(context.Background(), req); !errors.Is(err, artifacts.ErrInvalidFile) || !strings.Contains(err.Error(), "files[0]") || !strings.Contains(err.Error(), "was not written") {
		t.Fatalf("a file in a read-only folder: %v", err)
	}
	if res := call("print(open('c.txt').read())", 0, artifacts.Input{Path: "c.txt", Data: []byte("c")}); res.Stdout != "c\n" {
		t.Fatalf("the call after a refused file: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

// PID 1 of a session's container reaps: the orphans of a call leave no
// zombie behind, and after a fork bomb that filled the pids limit and timed
// out, the next calls have their pids back.
func TestSessionReaps(t *testing.T) {
	r, _ := newRunner(t, Config{Languages: []string{"python", "bash"}})
	sandboxtest.CheckSessionReaps(t, r.Sessions())
}
