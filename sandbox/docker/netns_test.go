package docker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// The network namespace of a container (see hostConfig): with the sandbox
// image, the runtime makes it (NetworkDisabled), not the engine's network
// stack; with an image that cannot resolve localhost by itself, the engine's
// stack does (network mode none alone). Either way a run has a loopback of
// its own and nothing else.

func TestOwnNetworkNamespace(t *testing.T) {
	r, cli := newRunner(t, Config{Languages: []string{"python", "bash"}})
	if !r.ownNetns {
		t.Fatalf("with the sandbox image %s the containers do not get the runtime's own network namespace (does the image have nss-myhostname? rebuild it with %s)", testImage(), BuildCommand)
	}
	if d := r.networkDetail(); !strings.Contains(d, "the runtime makes") {
		t.Errorf("the network protection does not say who makes the namespace: %s", d)
	}

	// Only a loopback, and the name localhost on it. Under runc, IPv6 is
	// off as under the engine's network stack, so localhost is 127.0.0.1
	// first; gVisor's own stack keeps ::1 (as it does under network mode
	// none).
	res := run(t, r, sandboxtest.Req("bash", `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`))
	if res.Stdout != "lo\n" {
		t.Fatalf("interfaces in a run container: %q, want only lo (stderr %q)", res.Stdout, res.Stderr)
	}
	res = run(t, r, sandboxtest.Req("python", sandboxtest.LocalhostPython))
	want := "pong 127.0.0.1\n"
	if r.engine.gvisor {
		want = "pong ::1\n"
	}
	if res.Stdout != want {
		t.Fatalf("localhost in a run: stdout %q stderr %q, want %q", res.Stdout, res.Stderr, want)
	}

	// As the engine holds it: no network sandbox of the engine's, network
	// mode none still set.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := r.start(ctx, r.runSpec("python", sandboxtest.DefaultLimits(), roleRun, runDeadline(time.Now(), time.Minute), nil), "python")
	if err != nil {
		t.Fatal(err)
	}
	defer r.discard(s)
	in, err := cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !in.Container.Config.NetworkDisabled || in.Container.HostConfig.NetworkMode != "none" {
		t.Fatalf("NetworkDisabled %v, network mode %q: want true and none", in.Container.Config.NetworkDisabled, in.Container.HostConfig.NetworkMode)
	}
	if ns := in.Container.NetworkSettings; ns != nil && ns.SandboxKey != "" {
		t.Fatalf("the engine made a network sandbox for the container: %s", ns.SandboxKey)
	}
}

// TestRunsDoNotShareALoopback has one run listen on its loopback and another,
// at the same time, try to connect to it: each container's loopback is its own.
func TestRunsDoNotShareALoopback(t *testing.T) {
	r, _ := newRunner(t, poolConfig(2, "python"))
	waitWarm(t, r, "python", 2)
	port := make(chan int, 1)
	var wg sync.WaitGroup
	var listener *sandbox.Result
	var lerr error
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req := sandboxtest.Req("python", `import socket, sys, time
s = socket.create_server(("0.0.0.0", 0))
print(s.getsockname()[1], flush=True)
s.settimeout(8)
try:
    s.accept()
    print("accepted")
except OSError:
    print("nobody came")
`)
		pw := &portWriter{c: port}
		req.Observe = func(st sandbox.Stream, p []byte) {
			if st == sandbox.Stdout {
				pw.write(p)
			}
		}
		listener, lerr = r.Run(ctx, req)
	})
	var p int
	select {
	case p = <-port:
	case <-time.After(time.Minute):
		t.Fatal("the listening run did not start")
	}
	res := run(t, r, sandboxtest.Req("python", fmt.Sprintf(`import socket
for host in ("127.0.0.1", "localhost"):
    try:
        socket.create_connection((host, %d), timeout=2).close()
        print("ESCAPED: reached the other run's loopback through", host)
    except OSError as e:
        print("CONTAINED", host, e.errno)
`, p)))
	wg.Wait()
	if strings.Contains(res.Stdout, "ESCAPED") || !strings.Contains(res.Stdout, "CONTAINED 127.0.0.1") {
		t.Fatalf("second run: %q %q", res.Stdout, res.Stderr)
	}
	if lerr != nil || !strings.Contains(listener.Stdout, "nobody came") {
		t.Fatalf("listening run: %+v %v", listener, lerr)
	}
}

// portWriter passes the first line written to it, a port number, to c.
type portWriter struct {
	mu   sync.Mutex
	buf  []byte
	c    chan int
	sent bool
}

func (w *portWriter) write(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if line, _, ok := strings.Cut(string(w.buf), "\n"); ok && !w.sent {
		if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil {
			w.sent = true
			w.c <- n
		}
	}
}

// TestImageWithoutLocalhost: an image whose resolver needs /etc/hosts for
// localhost gets the engine's network sandbox (network mode none alone),
// which writes /etc/hosts, so programs behave as with the sandbox image.
func TestImageWithoutLocalhost(t *testing.T) {
	cli := engine(t)
	img := buildTestImage(t, cli, fmt.Sprintf(`FROM %s
USER root
RUN sed -i 's/ myhostname//' /etc/nsswitch.conf && ! grep -q myhostname /etc/nsswitch.conf
USER 10001:10001
`, testImage()))
	r, _ := newRunner(t, Config{Image: img, Languages: []string{"python"}})
	if r.ownNetns {
		t.Error("an image that cannot resolve localhost by itself got the runtime's own network namespace")
	}
	if d := r.networkDetail(); !strings.Contains(d, "engine's network stack") {
		t.Errorf("the network protection does not say who makes the namespace: %s", d)
	}
	res := run(t, r, sandboxtest.Req("python", sandboxtest.LocalhostPython))
	if !strings.HasPrefix(res.Stdout, "pong ") {
		t.Fatalf("localhost in a run: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

// TestDecideNetns: the runtime's own namespace stays only with loopback
// alone and localhost resolving (no engine needed).
func TestDecideNetns(t *testing.T) {
	cases := []struct {
		localhost bool
		netifs    []string
		want      bool
	}{
		{true, []string{"lo"}, true},
		{false, []string{"lo"}, false},
		{true, []string{"lo", "eth0"}, false},
		{true, []string{"eth0", "lo"}, false},
		{true, nil, false},
	}
	for _, c := range cases {
		r := &Runner{ownNetns: true, log: testLogger(t)}
		r.decideNetns(c.localhost, c.netifs)
		if r.ownNetns != c.want {
			t.Errorf("localhost %v, interfaces %v: ownNetns %v, want %v", c.localhost, c.netifs, r.ownNetns, c.want)
		}
	}
	r := &Runner{log: testLogger(t)}
	r.decideNetns(true, []string{"lo"})
	if r.ownNetns {
		t.Error("decideNetns turned on a namespace the probe did not run with")
	}
}
