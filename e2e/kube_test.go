package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
)

// Kubernetes mode through the real binary, on the test cluster that
// KUBECONFIG names (.ci/ensure-kubernetes.sh); without one these tests
// skip, unless CODE_EXEC_REQUIRE_K8S=1.

// runsNamespace is where the tests' pods go (CODE_EXEC_K8S_NAMESPACE's default).
const runsNamespace = "codeexec-runs"

// kubeEnv is a server environment for kubernetes mode on the test cluster:
// runs of a fifth of a CPU (the cluster is one node of two cores, and a pod
// requests what it is limited to) and a warm pod per language.
func kubeEnv(t *testing.T, extra map[string]string) map[string]string {
	t.Helper()
	env := serverEnv(t, map[string]string{
		"CODE_EXEC_SANDBOX":       "kubernetes",
		"KUBECONFIG":              kubetest.Kubeconfig(t),
		"CODE_EXEC_CPUS":          "0.2",
		"CODE_EXEC_K8S_POOL_SIZE": "1",
	})
	if img := kubetest.Image(); img != "" {
		env["CODE_EXEC_K8S_IMAGE"] = img
	}
	if rc := kubetest.RuntimeClass(); rc != "" {
		env["CODE_EXEC_K8S_RUNTIME_CLASS"] = rc
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// logValue is the value of key in the server's first JSON log line whose
// message is msg, "" when there is none yet.
func logValue(logs, msg, key string) string {
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil || line["msg"] != msg {
			continue
		}
		v, _ := line[key].(string)
		return v
	}
	return ""
}

// TestKubernetesMode runs the documented example through the real binary in
// kubernetes mode, and checks what sandbox_info and tools/list say: the
// session tools are offered.
func TestKubernetesMode(t *testing.T) {
	cs, _ := connect(t, stdio, kubeEnv(t, nil), connectOpts{})
	checkExample(t, cs, "kubernetes")

	info := call(t, cs, "sandbox_info", map[string]any{})
	b, _ := json.Marshal(info.StructuredContent)
	var out struct {
		Mode       string   `json:"mode"`
		Sandboxed  bool     `json:"sandboxed"`
		Warnings   []string `json:"warnings"`
		Boundaries struct {
			Network bool `json:"network"`
		} `json:"boundaries"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Mode != "kubernetes" || !out.Sandboxed || !out.Boundaries.Network || strings.Contains(strings.Join(out.Warnings, " "), "no sessions") {
		t.Errorf("sandbox_info: %s", b)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		if strings.HasPrefix(tl.Name, "session_") {
			names = append(names, tl.Name)
		}
	}
	if strings.Join(names, ",") != "session_close,session_create,session_list" {
		t.Errorf("kubernetes mode lists the session tools %v, want session_close, session_create and session_list", names)
	}
}

// TestKubernetesSessions runs the session tests of every mode in kubernetes
// mode: state and files persist, a timeout loses the state, another client
// cannot use a session, session_close and the idle timeout delete its pod,
// files in and artifacts out call by call, and the egress allowlist with a
// network report per call.
func TestKubernetesSessions(t *testing.T) {
	kubetest.Kubeconfig(t)
	for name, check := range map[string]func(t *testing.T, mode string){
		"sessions":            checkSessions,
		"idle expiry":         checkSessionIdleExpiry,
		"files and artifacts": checkSessionFilesAndArtifacts,
		"network allowlist":   checkSessionNetworkAllowlist,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t, "kubernetes")
		})
	}
}

// TestKubernetesKilledServer kills a real codeexec with SIGKILL while a run
// and a session's call are in flight: its warm pods end by themselves (their
// stdin closes with the attach stream), the call's processes end at once
// (its exec's stream ends, and the session's supervisor stops the call), and
// once its Lease is stale, the next server's sweep removes every pod it
// left, the session's too, and the Lease.
func TestKubernetesKilledServer(t *testing.T) {
	cluster := kubetest.Connect(t, runsNamespace)
	s := startHTTP(t, http_, kubeEnv(t, nil))
	replica := logValue(s.stderr.String(), "kubernetes sandbox ready", "replica")
	if replica == "" {
		t.Fatalf("the server did not say its replica; stderr:\n%s", s.logTail())
	}
	ofReplica := "codeexec.io/replica=" + replica
	cs := dial(t, s, connectOpts{})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	running := func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}
	// The warm pool is full: a pod per language, attached and waiting.
	warm := map[string]bool{}
	if err := cluster.WaitPods(ctx, ofReplica, func(pods map[string]*corev1.Pod) bool {
		clear(warm)
		for n, p := range pods {
			if running(p) {
				warm[n] = true
			}
		}
		return len(warm) == 3
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
			"language": "bash", "code": "echo started; sleep 600", "timeout_seconds": 60}})
	}()
	// The run took a warm pod, and the pool made another.
	if err := cluster.WaitPods(ctx, ofReplica, func(pods map[string]*corev1.Pod) bool {
		for n, p := range pods {
			if !warm[n] && running(p) {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	id := createSession(t, cs, map[string]any{"language": "python"})
	pods, err := cluster.Pods.List(ctx, metav1.ListOptions{LabelSelector: ofReplica + ",codeexec.io/role=session"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the session's pod: %v %v", pods, err)
	}
	// The call's processes, as its pod sees them: under gVisor the node's
	// /proc does not show a pod's processes.
	sessionPod := pods.Items[0].Name
	inPod := func(m string) bool {
		procs, err := cluster.Processes(ctx, sessionPod, "run")
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(procs, func(p string) bool { return strings.Contains(p, m) })
	}
	m := marker()
	go func() {
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
			"language": "python", "session_id": id, "code": "import subprocess; subprocess.run(['sleep', '" + m + "'])", "timeout_seconds": 60}})
	}()
	waitFor(t, eventWait, "the session call's process with marker "+m+" to appear in its pod", func() bool { return inPod(m) })
	if err := s.cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	s.waitExit(t, time.Minute)
	waitFor(t, eventWait, "the session call's process with marker "+m+" to end in its pod after the server was killed", func() bool { return !inPod(m) })

	// The warm pods that waited end by themselves: the end of the attach
	// stream closes their stdin. (The run's pod ends at its deadline; a pod
	// the pool had not attached to yet, at its own.)
	if err := cluster.WaitPods(ctx, ofReplica, func(pods map[string]*corev1.Pod) bool {
		ended := 0
		for n := range warm {
			if p := pods[n]; p == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				ended++
			}
		}
		return ended >= len(warm)-1
	}); err != nil {
		t.Fatalf("the warm pods of the killed server did not end by themselves: %v", err)
	}

	// Its Lease goes stale its duration after its last renewal: only then
	// may another replica take it for stopped. (That moment is the
	// product's rule, not a guess: the test waits for it.)
	lease, err := cluster.Leases.Get(ctx, replica, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the killed server's Lease: %v", err)
	}
	staleAt := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second + time.Second)
	select {
	case <-time.After(time.Until(staleAt)):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	next := startHTTP(t, http_, kubeEnv(t, map[string]string{"CODE_EXEC_K8S_POOL_SIZE": "0"}))
	if err := cluster.WaitPods(ctx, ofReplica, func(pods map[string]*corev1.Pod) bool { return len(pods) == 0 }); err != nil {
		t.Fatalf("pods of the killed server are left after the next server's sweep: %v; its stderr:\n%s", err, next.logTail())
	}
	if _, err := cluster.Leases.Get(ctx, replica, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the killed server's Lease is left after the sweep (%v)", err)
	}
}

// TestKubernetesDeployment applies deploy/kubernetes/ to the test cluster,
// with a server image built from this checkout (docker/server/
// prebuilt.Dockerfile) and imported into the cluster, and reaches codeexec
// through its Service (kubectl port-forward): code_execute answers over
// streamable HTTP, as a gateway would call it, with the bearer token of
// the codeexec-auth Secret. The test cluster has no kube-proxy and its API
// server listens on the host's loopback only, so the server pod runs on
// the host's network (which the codeexec namespace then allows), with the
// API server's address in KUBERNETES_SERVICE_HOST, and its runs' pods get
// the tests' RuntimeClass (CODE_EXEC_K8S_RUNTIME_CLASS); everything else is
// the manifests' own.
func TestKubernetesDeployment(t *testing.T) {
	kc := kubetest.Kubeconfig(t)
	if os.Geteuid() != 0 {
		kubetest.SkipOrFail(t, "importing the server image into the test cluster needs root (.ci/ensure-kubernetes.sh)")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := kubectlPath(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kc, "DOCKER_BUILDKIT=0", "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	// The server image, from a static binary of this checkout.
	image := "codeexec-server:e2e"
	dir := t.TempDir()
	run("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "codeexec"), "./cmd/codeexec")
	run("docker", "build", "-q", "-f", "docker/server/prebuilt.Dockerfile", "-t", image, dir)
	sandboxImage := kubetest.Image()
	if sandboxImage == "" {
		sandboxImage = "codeexec-sandbox:latest"
	}
	// import: never a restart of the cluster, which other tests may be using
	// (start would restart one started from other inputs).
	cmd := exec.CommandContext(ctx, filepath.Join(root, ".ci/ensure-kubernetes.sh"), "import")
	cmd.Env = append(os.Environ(), "K8S_TEST_IMAGES="+sandboxImage+" "+image)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("importing %s into the test cluster: %v\n%s", image, err, out)
	}

	// The manifests, as an operator applies them, and the Secret they need.
	// At the end they go (not namespaces.yaml: codeexec-runs is the test
	// cluster's own), and the server, stopped with its pod, leaves none of
	// its pods nor its Lease behind.
	replica := ""
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// The server first, and all of it (foreground: its pods too), while
		// its Role still lets it delete its own pods and Lease as it stops.
		for _, f := range []string{"deployment.yaml", "service.yaml", "resourcequota.yaml", "networkpolicy.yaml", "rbac.yaml"} {
			_ = exec.CommandContext(ctx, kubectl, "--kubeconfig", kc, "delete", "--ignore-not-found", "--cascade=foreground", "--wait", "-f", filepath.Join(root, "deploy/kubernetes", f)).Run()
		}
		_ = exec.CommandContext(ctx, kubectl, "--kubeconfig", kc, "delete", "namespace", "codeexec", "--ignore-not-found", "--wait").Run()
		if replica == "" {
			return
		}
		cluster := kubetest.Connect(t, runsNamespace)
		if err := cluster.WaitPods(ctx, "codeexec.io/replica="+replica, func(pods map[string]*corev1.Pod) bool { return len(pods) == 0 }); err != nil {
			t.Errorf("the in-cluster server left pods behind: %v", err)
		}
		if _, err := cluster.Leases.Get(ctx, replica, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the in-cluster server left its Lease %s behind (%v)", replica, err)
		}
	})
	run(kubectl, "apply", "-k", "deploy/kubernetes/")
	token := randomHex(t)
	run(kubectl, "-n", "codeexec", "delete", "secret", "codeexec-auth", "--ignore-not-found")
	run(kubectl, "-n", "codeexec", "create", "secret", "generic", "codeexec-auth", "--from-literal=token="+token)

	// What the test cluster needs besides: the host's network, the API
	// server's address, this image, and runs that fit its two cores.
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	api, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	run(kubectl, "label", "namespace", "codeexec", "--overwrite", "pod-security.kubernetes.io/enforce=privileged")
	patch, _ := json.Marshal([]map[string]any{
		{"op": "add", "path": "/spec/template/spec/hostNetwork", "value": true},
		{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image},
		{"op": "replace", "path": "/spec/template/spec/containers/0/imagePullPolicy", "value": "Never"},
		{"op": "replace", "path": "/spec/template/spec/containers/0/ports", "value": []map[string]any{{"name": "mcp", "containerPort": port}}},
		{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": map[string]string{"name": "CODE_EXEC_ADDR", "value": "0.0.0.0:" + itoa(port)}},
		{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": map[string]string{"name": "KUBERNETES_SERVICE_HOST", "value": api.Hostname()}},
		{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": map[string]string{"name": "KUBERNETES_SERVICE_PORT", "value": api.Port()}},
		{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": map[string]string{"name": "CODE_EXEC_CPUS", "value": "0.2"}},
		{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": map[string]string{"name": "CODE_EXEC_K8S_POOL_SIZE", "value": "1"}},
		{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": map[string]string{"name": "CODE_EXEC_K8S_RUNTIME_CLASS", "value": kubetest.RuntimeClass()}},
	})
	run(kubectl, "-n", "codeexec", "patch", "deployment", "codeexec", "--type=json", "-p", string(patch))
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kc, "-n", "codeexec", "rollout", "status", "deployment/codeexec", "--timeout=5m").CombinedOutput(); err != nil {
		logs, _ := exec.CommandContext(ctx, kubectl, "--kubeconfig", kc, "-n", "codeexec", "logs", "deployment/codeexec", "--tail=40").CombinedOutput()
		t.Fatalf("the Deployment did not roll out: %v\n%s\nits logs:\n%s", err, out, logs)
	}

	logs := run(kubectl, "-n", "codeexec", "logs", "deployment/codeexec")
	if replica = logValue(logs, "kubernetes sandbox ready", "replica"); replica == "" {
		t.Fatalf("the server in the cluster did not say its replica:\n%s", logs)
	}

	// Through the Service, as a client in the cluster would reach it.
	local := portForward(t, ctx, kubectl, kc)
	s := &server{t: t, transport: http_, baseURL: "http://" + local, stderr: &lockedBuffer{}}
	cs := dial(t, s, connectOpts{token: token})
	checkExample(t, cs, "kubernetes")
}

// kubectlPath finds kubectl: KUBECTL, the PATH, or the test cluster's own
// (the bin folder beside its kubeconfig, as .ci/ensure-kubernetes.sh lays
// them out).
func kubectlPath(t *testing.T, kubeconfig string) string {
	t.Helper()
	if k := os.Getenv("KUBECTL"); k != "" {
		return k
	}
	if k, err := exec.LookPath("kubectl"); err == nil {
		return k
	}
	k := filepath.Join(filepath.Dir(kubeconfig), "bin", "kubectl")
	if _, err := os.Stat(k); err != nil {
		kubetest.SkipOrFail(t, "no kubectl: set KUBECTL, put one on PATH, or use .ci/ensure-kubernetes.sh's cluster")
	}
	return k
}

// portForward runs kubectl port-forward to the codeexec Service until the
// test ends and returns the local address it listens on.
func portForward(t *testing.T, ctx context.Context, kubectl, kubeconfig string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "-n", "codeexec", "port-forward", "--address", "127.0.0.1", "service/codeexec", ":8080")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &lockedBuffer{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// "Forwarding from 127.0.0.1:PORT -> 8080"
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "Forwarding" {
			go drain(sc)
			return f[2]
		}
	}
	t.Fatalf("kubectl port-forward said nothing of where it listens: %v", cmd.Stderr)
	return ""
}

// drain reads the rest of port-forward's output.
func drain(sc *bufio.Scanner) {
	for sc.Scan() {
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
