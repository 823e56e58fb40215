package kube

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// listenerProgram waits for a line on stdin, listens on port 8080, says so,
// and then says "accepted" for each connection.
const listenerProgram = `import socket, sys
sys.stdin.readline()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(16)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    print("accepted", flush=True)
    c.close()
`

// output collects what a pod writes and tells when it changes.
type output struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{}
}

func (o *output) observe(_ sandbox.Stream, p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b.Write(p)
	close(o.changed)
	o.changed = make(chan struct{})
}

// waitFor waits until the output holds s.
func (o *output) waitFor(ctx context.Context, s string) error {
	for {
		o.mu.Lock()
		got, changed := o.b.String(), o.changed
		o.mu.Unlock()
		if strings.Contains(got, s) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return errors.New("the pod never wrote " + s + "; it wrote " + got)
		}
	}
}

// listenerPod starts, through r, a pod of the sandbox image that listens on
// port 8080 of its own address, and returns its address and its output.
func listenerPod(t *testing.T, r *Runner) (string, *output) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	py := r.interps["python"].Path
	s, err := r.start(ctx, podSpec{role: roleProbe, cmd: []string{py, "-c", listenerProgram}, limits: containerLimits(kubetest.Limits(sandboxtest.DefaultLimits())), deadline: time.Now().Add(10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.discard(s) })
	out := &output{changed: make(chan struct{})}
	s.out.Attach(sandbox.NewOutput(1<<20, nil).Observe(out.observe))
	go func() { _, _ = s.stdin.Write([]byte("go\n")) }()
	if err := out.waitFor(ctx, "listening"); err != nil {
		t.Fatal(err)
	}
	pod, _, _ := s.state.now()
	if pod == nil || pod.Status.PodIP == "" {
		t.Fatalf("the listener pod has no address: %+v", pod)
	}
	return net.JoinHostPort(pod.Status.PodIP, "8080"), out
}

// TestNetworkProbeRefuses gives the network probe an address that pods can
// reach, a listener in another pod: kubernetes mode refuses to start,
// naming it, unless CODE_EXEC_K8S_NETWORK_CHECK=warn, and then sandbox_info
// reports the network as not isolated.
func TestNetworkProbeRefuses(t *testing.T) {
	helper := newRunner(t, Config{Languages: []string{"python"}})
	allowPodToPod(t)
	addr, out := listenerPod(t, helper)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := New(ctx, Config{Image: kubetest.Image(), RuntimeClass: kubetest.RuntimeClass(), Languages: []string{"python"}, Logger: testLogger(t), NetworkCheckAddrs: []string{addr}})
	if err == nil {
		_ = r.Close()
		t.Fatalf("kubernetes mode started although its probe pod could reach %s", addr)
	}
	if !errors.Is(err, sandbox.ErrSandboxUnavailable) || !strings.Contains(err.Error(), "reached an address of CODE_EXEC_K8S_NETWORK_CHECK_ADDRS at "+addr) ||
		!strings.Contains(err.Error(), "CODE_EXEC_K8S_NETWORK_CHECK=warn") {
		t.Fatalf("New's error does not name what the probe reached: %v", err)
	}
	if err := out.waitFor(ctx, "accepted"); err != nil {
		t.Fatalf("the probe pod said it reached the listener, which saw no connection: %v", err)
	}
	t.Logf("New: %v", err)

	warned := newRunner(t, Config{Languages: []string{"python"}, NetworkCheck: NetworkWarn, NetworkCheckAddrs: []string{addr}})
	caps := warned.Capabilities()
	if caps.Isolation.Network || caps.Active("network") {
		t.Errorf("the network is reported isolated although the probe reached %s: %+v", addr, caps.Isolation)
	}
	if w := strings.Join(caps.Warnings, "\n"); !strings.Contains(w, "NOT cut off from the network") || !strings.Contains(w, addr) {
		t.Errorf("no warning names what the probe reached: %q", caps.Warnings)
	}
	res := run(t, warned, sandboxtest.Req("python", "print(2**64)"))
	if res.Stdout != "18446744073709551616\n" {
		t.Fatalf("a run with the warning: %+v", res)
	}
}

// podBridge is the test cluster's pod network (.ci/kubernetes/cni.conflist).
const podBridge = "k8sbr0"

// allowPodToPod lets the test cluster's pods reach each other while the
// test runs, as on a cluster whose network plugin enforces no
// NetworkPolicy. The cluster's bridge enforces none either, but this host
// passes bridged packets through iptables (bridge-nf-call-iptables), whose
// FORWARD chain drops them (Docker's policy): one rule, for packets from
// the pod bridge to the pod bridge only, in DOCKER-USER (the chain Docker
// keeps for its users' rules) or FORWARD, removed at the end.
func allowPodToPod(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		kubetest.SkipOrFail(t, "letting the test cluster's pods reach each other needs root (an iptables rule)")
	}
	if _, err := net.InterfaceByName(podBridge); err != nil {
		kubetest.SkipOrFail(t, "the test cluster's pod bridge %s is not on this host: %v", podBridge, err)
	}
	chain := "DOCKER-USER"
	if exec.Command("iptables", "-S", chain).Run() != nil {
		chain = "FORWARD"
	}
	rule := []string{chain, "-i", podBridge, "-o", podBridge, "-m", "comment", "--comment", "codeexec kubernetes-mode test", "-j", "ACCEPT"}
	if out, err := exec.Command("iptables", append([]string{"-I"}, rule...)...).CombinedOutput(); err != nil {
		kubetest.SkipOrFail(t, "cannot let the test cluster's pods reach each other: iptables: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("iptables", append([]string{"-D"}, rule...)...).CombinedOutput(); err != nil {
			t.Errorf("removing the iptables rule %v: %v: %s", rule, err, out)
		}
	})
}
