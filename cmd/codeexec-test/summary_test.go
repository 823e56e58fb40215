package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// The skip reasons of this repository's tests, as they print them (the
// file that says each), fall into their groups; the rest are listed by
// their own reason.
func TestGroups(t *testing.T) {
	t.Parallel()
	const docker, image = "no Docker Engine", "no sandbox image"
	for _, c := range []struct{ reason, group string }{
		{"-short: " + sandboxtest.NeedsDocker, "-short"},
		{"-short: " + sandboxtest.NeedsKubernetes, "-short"},
		{"-short: the load test sends 500 calls", "-short"},
		// sandbox/kube/kubetest
		{"no Kubernetes cluster: KUBECONFIG is not set (export KUBECONFIG=$(sudo .ci/ensure-kubernetes.sh)); set CODE_EXEC_REQUIRE_K8S=1 to fail instead of skipping", "no Kubernetes cluster"},
		{"kubernetes mode unavailable: kubernetes: sandbox unavailable: no route; set CODE_EXEC_REQUIRE_K8S=1 to fail instead of skipping", "no Kubernetes cluster"},
		// sandbox/containment_test.go, e2e/kube_test.go, sandbox/kube/probe_test.go
		{"kubernetes mode unavailable: KUBECONFIG is not set; set CODE_EXEC_REQUIRE_K8S=1 to fail instead of skipping", "no Kubernetes cluster"},
		{"importing the server image into the test cluster needs root (.ci/ensure-kubernetes.sh); set CODE_EXEC_REQUIRE_K8S=1 to fail instead of skipping", "no Kubernetes cluster"},
		{"no kubectl: set KUBECTL, put one on PATH, or use .ci/ensure-kubernetes.sh's cluster; set CODE_EXEC_REQUIRE_K8S=1 to fail instead of skipping", "no Kubernetes cluster"},
		// e2e/approval_console_test.go
		{"skipping this browser test: /usr/bin/chromium is missing (apt-get install -y chromium; set CODE_EXEC_REQUIRE_BROWSER=1 to make this a failure)", "no Chromium"},
		// e2e/replicas_test.go
		{"skipping the replicas test: haproxy is missing (apt-get install -y haproxy; set CODE_EXEC_REQUIRE_HAPROXY=1 to make this a failure)", "no HAProxy"},
		// sandbox/docker/datascience_test.go, e2e/files_test.go
		{"the data-science image codeexec-sandbox:datascience is missing (build it with docker/build-sandbox-image.sh --profile datascience): No such image; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", "no data-science image"},
		// sandbox/docker/docker_test.go, e2e/load_test.go, and docker.New's error
		{"the sandbox image codeexec-sandbox:latest is missing (build it with docker/build-sandbox-image.sh): No such image; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", image},
		{"docker mode unavailable: docker: sandbox unavailable: the sandbox image codeexec-sandbox:latest is not on the Docker Engine at unix:///var/run/docker.sock; build it with docker/build-sandbox-image.sh (or set CODE_EXEC_DOCKER_IMAGE); set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", image},
		// sandbox/docker/ping.go's socketRefusesUser
		{"docker mode cannot run: sandbox unavailable: the Docker Engine's socket /var/run/docker.sock (owner root, group docker, mode 0660) exists, but this user, codeexec-ci (uid 1001), may not open it: add the user to the group docker (...), or set DOCKER_HOST to an engine this user may use; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", "the Docker Engine's socket refuses this user"},
		{"docker client: unable to parse docker host `tcp:/x`; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", docker},
		// sandbox/packages/packagestest
		{"missing pip for /usr/bin/python3 (exit status 1), npm on /usr/local/bin:/usr/bin:/bin (exec: \"npm\": executable file not found in $PATH): run .ci/ensure-installers.sh", "no pip or npm for process mode's package installs"},
		// sandbox/process/files_test.go, sandbox/datascience, sandbox/host, e2e/files_test.go
		{"python cannot import [pandas matplotlib] here; run .ci/ensure-datascience.sh", "no pandas or matplotlib for the host's python3"},
		{"/usr/bin/python3 cannot import matplotlib and pandas (exit status 1): run .ci/ensure-datascience.sh", "no pandas or matplotlib for the host's python3"},
		{"the host's python has no matplotlib", "no pandas or matplotlib for the host's python3"},
		// sandbox/sandboxtest, sandbox/sessions, sandbox/kube, sandbox/datascience, sandbox
		{"language javascript unavailable on this host: node: executable file not found", "an interpreter is missing"},
		{"node is not installed: exec: \"node\": executable file not found in $PATH", "an interpreter is missing"},
		{"no python3 to run the relay with", "an interpreter is missing"},
		{"no /usr/bin/python3: stat /usr/bin/python3: no such file or directory", "an interpreter is missing"},
		{"no /bin/bash", "an interpreter is missing"},
		// sandbox/artifacts, cmd/codeexec, sandbox/process
		{"changing owners needs root", "not root"},
		{"only root can give a folder to another user (uid 65534) for this test", "not root"},
		{"only root runs as host users of their own without a user namespace", "not root"},
		// sandbox/process, sandbox (the containment suite), e2e
		{"memory cgroup unavailable to an ordinary user here: no delegated cgroup", "process mode's kernel isolation unavailable to this user or host"},
		{"landlock is unavailable on this host: the kernel has no Landlock", "process mode's kernel isolation unavailable to this user or host"},
		{`process mode needs "network namespace" to contain this attack, and it is unavailable on this host`, "process mode's kernel isolation unavailable to this user or host"},
		{"without user namespaces process mode has no network namespace for an allowlist", "process mode's kernel isolation unavailable to this user or host"},
		// listed by their own reason
		{"restarts the Docker Engine under every other test; set CODE_EXEC_TEST_ENGINE_RESTART=1 and run it alone", ""},
		{"not checked under gVisor: the host's OOM killer kills gVisor's kernel; see docs/modes.md#runtimes", ""},
		{"not contained as in docker mode: no seccomp; see docs/modes.md#kubernetes-mode", ""},
		{"no go command to list the packages with", ""},
	} {
		got := ""
		if i := classify(c.reason); i >= 0 {
			got = groups[i].lacks
		}
		if got != c.group {
			t.Errorf("%q is in the group %q, want %q", c.reason, got, c.group)
		}
	}
}

// Docker mode's own explanations of an engine that does not answer (what
// docker-mode tests skip with) are of the group "no Docker Engine": no
// socket, a socket nothing listens on, one that closes every connection.
func TestDockerEngineReasons(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	closing := filepath.Join(dir, "closing.sock")
	cl, err := net.Listen("unix", closing)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	go func() {
		for {
			c, err := cl.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	for _, sock := range []string{filepath.Join(dir, "missing.sock"), stale, closing} {
		t.Setenv("DOCKER_HOST", "unix://"+sock)
		cli, err := client.New(client.FromEnv)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = docker.Ping(ctx, cli)
		cancel()
		_ = cli.Close()
		if err == nil {
			t.Fatalf("%s answered a ping", sock)
		}
		reason := fmt.Sprintf("docker mode cannot run: %v; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", err)
		if i := classify(reason); i < 0 || groups[i].lacks != "no Docker Engine" {
			t.Errorf("%q is not of the group %q", reason, "no Docker Engine")
		}
	}
}

// docs/development.md#skipped-tests has a row for every group.
func TestGroupsDocumented(t *testing.T) {
	t.Parallel()
	const doc = "../../docs/development.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Skipped tests\n")
	if !ok {
		t.Fatalf("%s has no section '## Skipped tests'", doc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, g := range groups {
		if row := "| " + g.lacks + " |"; !strings.Contains(section, "\n"+row) {
			t.Errorf("%s#skipped-tests has no row that begins %q", doc, row)
		}
	}
}

// The summary does not depend on the order in which packages reported
// their skips, which the machine's load decides (the flake hunt saw
// "(in engine, broken)" where the fixture's golden file says "(in broken,
// engine)").
func TestSummaryIgnoresArrivalOrder(t *testing.T) {
	skips := []skip{
		{"m/engine", "-short"},
		{"m/broken", "-short"},
		{"m/host", "restarts the Docker Engine under every other test"},
		{"m/host", ""},
		{"m/engine", "a reason of its own"},
		{"m/a", "a reason of its own"},
	}
	var first bytes.Buffer
	writeSummary(&first, skips, "m")
	for i := range 20 {
		shuffled := slices.Clone(skips)
		rand.New(rand.NewPCG(uint64(i), 1)).Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		var got bytes.Buffer
		writeSummary(&got, shuffled, "m")
		if got.String() != first.String() {
			t.Fatalf("the skips in the order %v give\n%s\nand in the order %v\n%s", shuffled, got.String(), skips, first.String())
		}
	}
	if !strings.Contains(first.String(), "(in a, engine)") || !strings.HasSuffix(first.String(), "(the test gave no reason) (in host)\n") {
		t.Fatalf("want packages in name order and the skips without a reason last:\n%s", first.String())
	}
}
