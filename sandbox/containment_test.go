package sandbox_test

// The containment suite: every attack under testdata/attacks is run, in each
// language it is written in, against every sandbox mode. A case lists the
// modes that must contain it; there the attack must fail, leave no trace on
// the host, and the runner must answer the next request correctly. Cases that
// are safe to run unsandboxed list the modes where they must succeed
// ("proves_in", mode none), which shows that the attack code really works.
//
// Network cases aim only at listeners this test starts on this machine
// (loopback, or the Docker bridge address), never at another address and
// never through a DNS lookup.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/kube"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

var update = flag.Bool("update", false, "rewrite the containment table in docs/modes.md")

func TestMain(m *testing.M) {
	process.MaybeRunHelper()
	// The server runs in a session keyring of its own, as under
	// `keyctl session -`, so that keyring-session can check that runs
	// neither read nor plant keys there.
	sandboxtest.InSessionKeyring()
	os.Exit(m.Run())
}

// attack is one case file.
type attack struct {
	Name     string `json:"-"`
	Attack   string `json:"attack"`
	Category string `json:"category"`
	// Contained lists the modes that must stop the attack.
	Contained []string `json:"contained"`
	// Requires lists the protections process mode needs to contain it.
	Requires []string `json:"requires"`
	// ProvesIn lists modes where the attack is harmless to run and must
	// succeed, proving that its code works.
	ProvesIn       []string `json:"proves_in"`
	TimeoutSeconds float64  `json:"timeout_seconds"`
	// Expect is a limit the run must hit: timed_out or truncated.
	Expect string `json:"expect"`
	// Victim starts another run (the victim) in the same mode before the
	// attack, which must finish undisturbed while the attack runs.
	Victim bool `json:"victim"`
	// ServerKeyring: the case needs the server to run in a session keyring
	// of its own, where the test puts a key holding the canary.
	ServerKeyring bool              `json:"server_keyring"`
	Code          map[string]string `json:"-"` // language -> program
}

var extLanguage = map[string]string{".py": "python", ".js": "javascript", ".sh": "bash"}

func loadAttacks(t *testing.T) []attack {
	t.Helper()
	files, err := filepath.Glob("testdata/attacks/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no attack cases: %v", err)
	}
	var out []attack
	for _, f := range files {
		ar, err := txtar.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		a := attack{Name: strings.TrimSuffix(filepath.Base(f), ".txtar"), Code: map[string]string{}}
		for _, file := range ar.Files {
			if file.Name == "case.json" {
				dec := json.NewDecoder(bytes.NewReader(file.Data))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&a); err != nil {
					t.Fatalf("%s: case.json: %v", f, err)
				}
				continue
			}
			lang, ok := extLanguage[filepath.Ext(file.Name)]
			if !ok {
				t.Fatalf("%s: unknown section %s", f, file.Name)
			}
			a.Code[lang] = string(file.Data)
		}
		if a.Attack == "" || len(a.Code) == 0 || len(a.Contained) == 0 {
			t.Fatalf("%s: a case needs attack, contained and code", f)
		}
		out = append(out, a)
	}
	return out
}

// gvisorGaps are the cases docker and kubernetes mode do not pass under
// gVisor (runsc as docker/install-gvisor.sh builds it, registered with the
// engine, or the test cluster's RuntimeClass gvisor), with what happens
// instead. CI runs the suite under runsc (CODE_EXEC_DOCKER_RUNTIME=runsc)
// and under gvisor (CODE_EXEC_K8S_RUNTIME_CLASS=gvisor); docs/modes.md lists
// the same gaps.
var gvisorGaps = map[string]string{
	"sig-supervisor":   "gVisor does not shield a PID namespace's init from its own namespace's signals: signals 32 and 33, which the supervisor cannot ignore, end the container, so the run ends with a server error (the container stopped) instead of a result; nothing outlives the container",
	"cross-run-kill":   "gVisor lets a program SIGKILL its container's pid 1: the run ends with a server error instead of a result; other runs are in other sandboxes and are not touched",
	"sig-dispositions": "gVisor's /proc/self/status has no SigBlk or SigIgn lines, so the case cannot tell",
	"res-fill-workdir": "gVisor's tmpfs does not enforce /tmp's inode cap (nr_inodes); the files count against the container's memory limit instead",
}

// kubernetesGaps are the docker cases that kubernetes mode does not contain
// as docker mode does, with what happens instead; docs/modes.md lists them.
var kubernetesGaps = map[string]string{
	"res-fill-workdir": "Kubernetes gives a memory-backed emptyDir (the pod's /tmp) a size but no cap on its number of files (tmpfs nr_inodes); each file's kernel memory counts against the pod's memory limit, which bounds them instead (a run of 64 MiB that makes empty files is killed by it), so a run of 256 MiB makes its 60000 files",
}

// underGVisor reports whether a docker runner runs its containers, or a
// kubernetes runner its pods, under gVisor, as sandbox_info says.
func underGVisor(r sandbox.Runner) bool {
	for _, p := range r.Capabilities().Protections {
		if (p.Name == "runtime" || p.Name == "runtime class") && strings.Contains(p.Detail, "gVisor") {
			return true
		}
	}
	return false
}

// modeRunner is a runner under test with what the attacks need to know of it.
type modeRunner struct {
	mode   sandbox.Mode
	runner sandbox.Runner
	// host is the address at which programs in this mode would reach a
	// service of the host.
	host string
	// egress: runs reach codeexec's egress proxy (CODE_EXEC_NETWORK=allowlist,
	// with private addresses allowed and none of the test's listeners on
	// the list); such a runner runs the network cases only, which it must
	// contain as the mode does without the allowlist.
	egress bool
	// skip is why the mode cannot run here (no runner): each of its cases
	// is a subtest that skips with it, so that the count of skips says
	// what did not run.
	skip string
}

// name names the runner in subtests: its mode, and "-allowlist" with egress.
func (m modeRunner) name() string {
	if m.egress {
		return string(m.mode) + "-allowlist"
	}
	return string(m.mode)
}

func newModeRunners(t *testing.T) []modeRunner {
	t.Helper()
	ctx := context.Background()
	langs := sandbox.LanguageNames()
	work := t.TempDir()
	for _, d := range []string{work, filepath.Dir(work)} {
		_ = os.Chmod(d, 0o711)
	}
	var out []modeRunner
	// As the server runs it: runs prepared ahead, with python's and
	// javascript's interpreters started in them (for the attacks' limits).
	pr, err := process.New(ctx, process.Config{Languages: langs, WorkRoot: work, PoolSize: 1, PoolLimits: attackLimits()})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, modeRunner{mode: sandbox.ModeProcess, runner: pr, host: "127.0.0.1"})
	hr, err := host.New(ctx, host.Config{Languages: langs, WorkRoot: work})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, modeRunner{mode: sandbox.ModeNone, runner: hr, host: "127.0.0.1"})
	if testing.Short() {
		out = append(out, modeRunner{mode: sandbox.ModeDocker, skip: "-short: " + sandboxtest.NeedsDocker})
		out = append(out, unavailable(sandbox.ModeKubernetes, "-short: "+sandboxtest.NeedsKubernetes)...)
		return closeAtCleanup(t, out)
	}
	img := os.Getenv("CODE_EXEC_DOCKER_IMAGE")
	if img == "" {
		img = "codeexec-sandbox:latest"
	}
	dr, err := docker.New(ctx, docker.Config{Image: img, Runtime: os.Getenv("CODE_EXEC_DOCKER_RUNTIME"), Languages: langs})
	bridge := dockerBridgeIP()
	switch {
	case err != nil && os.Getenv("CODE_EXEC_REQUIRE_DOCKER") == "1":
		t.Fatalf("docker mode unavailable: %v", err)
	case err != nil:
		out = append(out, modeRunner{mode: sandbox.ModeDocker, skip: fmt.Sprintf("docker mode unavailable: %v; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", err)})
	case bridge == "":
		_ = dr.Close()
		if os.Getenv("CODE_EXEC_REQUIRE_DOCKER") == "1" {
			t.Fatal("no docker0 bridge address on this host")
		}
		out = append(out, modeRunner{mode: sandbox.ModeDocker, skip: "no docker0 bridge address on this host; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping"})
	default:
		out = append(out, modeRunner{mode: sandbox.ModeDocker, runner: dr, host: bridge})
	}
	out = append(out, kubernetesRunners(t, ctx, langs)...)
	return closeAtCleanup(t, out)
}

// unavailable are the runners of a mode that cannot run here, without and
// with the allowlist, whose cases skip saying why.
func unavailable(mode sandbox.Mode, why string) []modeRunner {
	return []modeRunner{{mode: mode, skip: why}, {mode: mode, egress: true, skip: why}}
}

// closeAtCleanup closes the runners at the end of the test.
func closeAtCleanup(t *testing.T, runners []modeRunner) []modeRunner {
	t.Cleanup(func() {
		for _, m := range runners {
			if m.runner == nil {
				continue
			}
			if err := m.runner.Close(); err != nil {
				t.Errorf("closing %s: %v", m.name(), err)
			}
		}
	})
	return runners
}

// kubernetesRunners are kubernetes mode on the cluster that KUBECONFIG
// names, without and with the network allowlist, each run with the tests'
// CPU (the test cluster is one node of two cores), or none when there is no
// cluster (a failure with CODE_EXEC_REQUIRE_K8S=1). Its programs would reach
// a service of the host at one of the host's own addresses (the node of the
// test cluster is this machine).
func kubernetesRunners(t *testing.T, ctx context.Context, langs []string) []modeRunner {
	t.Helper()
	require := os.Getenv(kubetest.RequireVariable) == "1"
	skip := func(why string) []modeRunner {
		if require {
			t.Fatalf("kubernetes mode unavailable: %s (%s=1)", why, kubetest.RequireVariable)
		}
		return unavailable(sandbox.ModeKubernetes, fmt.Sprintf("kubernetes mode unavailable: %s; set %s=1 to fail instead of skipping", why, kubetest.RequireVariable))
	}
	if os.Getenv("KUBECONFIG") == "" {
		return skip("KUBECONFIG is not set")
	}
	hostIP := sandboxtest.HostAddress()
	if hostIP == "" {
		return skip("this host has no address but loopback")
	}
	kr, err := kube.New(ctx, kube.Config{Image: kubetest.Image(), RuntimeClass: kubetest.RuntimeClass(), Languages: langs})
	if err != nil {
		return skip(err.Error())
	}
	out := []modeRunner{{mode: sandbox.ModeKubernetes, runner: kubetest.Scaled{Runner: kr}, host: hostIP}}
	ke, err := kube.New(ctx, kube.Config{Image: kubetest.Image(), Languages: langs, Egress: proxy.New(trapPolicy(t), nil)})
	if err != nil {
		_ = kr.Close()
		return skip("with CODE_EXEC_NETWORK=allowlist: " + err.Error())
	}
	return append(out, modeRunner{mode: sandbox.ModeKubernetes, runner: kubetest.Scaled{Runner: ke}, host: hostIP, egress: true})
}

// trapPolicy is the network policy of the runners with egress: private
// addresses allowed, so that only the allowlist, which names none of the
// traps, stands between a program and the host's listeners.
func trapPolicy(t *testing.T) egress.Policy {
	t.Helper()
	allow, err := egress.ParseAllowlist([]string{"allowed.test:1"})
	if err != nil {
		t.Fatal(err)
	}
	pins, err := egress.ParsePins("allowed.test=127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return egress.Policy{Allow: allow, AllowPrivate: true, Resolver: pins, // pins only: nothing reaches DNS
		Caps: egress.Caps{Connections: 16, Bytes: 1 << 20, ConnectTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second}}
}

// dockerBridgeIP is the IPv4 address of docker0, the host's side of the
// default bridge ("" when there is none).
func dockerBridgeIP() string {
	ifc, err := net.InterfaceByName("docker0")
	if err != nil {
		return ""
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return ""
}

// traps are the host-side things an attack may touch: listeners that count
// what reaches them, and a canary file.
type traps struct {
	tcp        *sandboxtest.TCPTrap
	udp        *sandboxtest.UDPTrap
	canaryDir  string
	canaryFile string
	canary     string
	marker     string
}

func setTraps(t *testing.T, hostIP string) *traps {
	t.Helper()
	tr := &traps{marker: sandboxtest.Marker()}
	tr.tcp = sandboxtest.ListenTCP(t, hostIP)
	tr.udp = sandboxtest.ListenUDP(t, hostIP)

	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	tr.canaryDir, err = os.MkdirTemp(home, "codeexec-canary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tr.canaryDir) })
	_ = os.Chmod(tr.canaryDir, 0o755)
	tr.canary = "canary-" + tr.marker
	tr.canaryFile = filepath.Join(tr.canaryDir, "secret.txt")
	if err := os.WriteFile(tr.canaryFile, []byte(tr.canary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Descriptors the server holds without close-on-exec, as if inherited
	// from whatever started it: the canary for reading and for appending,
	// and its directory.
	if closeFDs, err := sandboxtest.InheritableFiles(
		[]string{tr.canaryFile, tr.canaryFile, tr.canaryDir},
		[]int{syscall.O_RDONLY, syscall.O_WRONLY | syscall.O_APPEND, syscall.O_RDONLY | sandboxtest.ODirectory}); err == nil {
		t.Cleanup(closeFDs)
	} else if runtime.GOOS == "linux" {
		t.Fatal(err)
	}
	// A key holding the canary in the server's session keyring.
	if sandboxtest.SessionKeyringAvailable() {
		remove, err := sandboxtest.PlantKey("codeexec-canary-"+tr.marker, tr.canary)
		if err != nil {
			t.Fatalf("planting a key in the session keyring: %v", err)
		}
		t.Cleanup(remove)
	}
	return tr
}

func (tr *traps) expand(code, hostIP string) string {
	return strings.NewReplacer(
		"{{HOST}}", hostIP,
		"{{TCP_PORT}}", strconv.Itoa(tr.tcp.Port()),
		"{{UDP_PORT}}", strconv.Itoa(tr.udp.Port()),
		"{{CANARY_DIR}}", tr.canaryDir,
		"{{CANARY_FILE}}", tr.canaryFile,
		"{{CANARY}}", tr.canary,
		"{{MARKER}}", tr.marker,
	).Replace(code)
}

// escaped lists the evidence that an attack got through.
func (tr *traps) escaped(t *testing.T, res *sandbox.Result) []string {
	t.Helper()
	var ev []string
	out := res.Stdout + res.Stderr
	if i := strings.Index(out, "ESCAPED"); i >= 0 {
		line, _, _ := strings.Cut(out[i:], "\n")
		ev = append(ev, "the program says "+line)
	}
	if strings.Contains(out, sandboxtest.SecretValue) {
		ev = append(ev, "the server's secret appears in the output")
	}
	if strings.Contains(out, tr.canary) {
		ev = append(ev, "the canary file's content appears in the output")
	}
	if n := tr.tcp.Count(t); n > 0 {
		ev = append(ev, fmt.Sprintf("the host's TCP listener accepted %d connections", n))
	}
	if n := tr.udp.Count(t); n > 0 {
		ev = append(ev, fmt.Sprintf("the host's UDP listener received %d datagrams", n))
	}
	if b, err := os.ReadFile(tr.canaryFile); err != nil || string(b) != tr.canary+"\n" {
		ev = append(ev, "the canary file was changed or removed")
	}
	if entries, _ := os.ReadDir(tr.canaryDir); len(entries) != 1 {
		ev = append(ev, fmt.Sprintf("files were planted beside the canary: %d entries", len(entries)))
	}
	if sandboxtest.ProcessesAlive(t, tr.marker) {
		ev = append(ev, "a process of the run outlived it")
	}
	if sandboxtest.KeyPlanted("codeexec-planted-" + tr.marker) {
		ev = append(ev, "a key was planted in the server's session keyring")
	}
	return ev
}

// victimProgram is the run that cases with "victim" disturb: it says it
// has started, then needs an inotify instance every 50 ms for twelve
// seconds (time for the attack to start and end while it runs, on a busy
// machine too), and says whether it got one every time.
const victimProgram = `import ctypes, os, time
print("victim started", flush=True)
libc = ctypes.CDLL(None, use_errno=True)
end = time.time() + 12
fails = 0
while time.time() < end:
    fd = libc.inotify_init()
    if fd < 0:
        fails += 1
    else:
        os.close(fd)
    time.sleep(0.05)
print("victim finished, inotify_init failed %d times" % fails)
`

// victim is a victim run, started before the attack.
type victim struct {
	done chan string
}

// startVictim starts the victim run and returns once its program has
// started (it printed its first line).
func startVictim(t *testing.T, m modeRunner) *victim {
	t.Helper()
	v := &victim{done: make(chan string, 1)}
	started := make(chan struct{})
	var once sync.Once
	go func() {
		req := sandboxtest.Req("python", victimProgram)
		req.Limits.Timeout = time.Minute
		req.Observe = func(s sandbox.Stream, _ []byte) {
			if s == sandbox.Stdout {
				once.Do(func() { close(started) })
			}
		}
		res, err := m.runner.Run(context.Background(), req)
		switch {
		case err != nil:
			v.done <- "the victim run failed: " + err.Error()
		case res.ExitCode != 0 || res.Stdout != "victim started\nvictim finished, inotify_init failed 0 times\n":
			v.done <- fmt.Sprintf("another run was disturbed: exit %d, signal %q, stdout %q, stderr %.200q", res.ExitCode, res.Signal, res.Stdout, res.Stderr)
		default:
			v.done <- ""
		}
	}()
	select {
	case <-started:
	case d := <-v.done:
		t.Fatalf("the victim ended before it said it had started: %s", d)
	}
	return v
}

// ranThrough reports whether the victim is still running, once the attack
// has returned: a victim that ended first proves nothing.
func (v *victim) ranThrough() bool {
	select {
	case d := <-v.done:
		v.done <- d
		return false
	default:
		return true
	}
}

// wait waits for the victim and says how it was disturbed ("" when it was
// not).
func (v *victim) wait() string { return <-v.done }

// rootOnly are the protections that an ordinary user's server has only where
// the host delegates a cgroup v2 subtree to it: without root, a case that
// needs one is skipped even with CODE_EXEC_REQUIRE_ISOLATION=1.
var rootOnly = []string{"memory cgroup", "separate run users"}

func TestContainment(t *testing.T) {
	t.Setenv(sandboxtest.SecretName, sandboxtest.SecretValue)
	attacks := loadAttacks(t)
	runners := newModeRunners(t)
	for _, a := range attacks {
		for _, lang := range sortedKeys(a.Code) {
			for _, m := range runners {
				if m.egress && a.Category != "network" {
					continue
				}
				mode := string(m.mode)
				must := slices.Contains(a.Contained, mode) ||
					// kubernetes mode promises docker mode's containment
					(m.mode == sandbox.ModeKubernetes && slices.Contains(a.Contained, string(sandbox.ModeDocker)))
				proves := slices.Contains(a.ProvesIn, mode)
				if !must && !proves {
					continue // unsafe to run where it is not contained
				}
				t.Run(fmt.Sprintf("%s/%s/%s", a.Name, lang, m.name()), func(t *testing.T) {
					if m.skip != "" {
						t.Skip(m.skip)
					}
					if a.ServerKeyring && !sandboxtest.SessionKeyringAvailable() {
						t.Skip("the test could not run the server in a session keyring of its own (keyrings refused on this host)")
					}
					if why, ok := kubernetesGaps[a.Name]; ok && m.mode == sandbox.ModeKubernetes {
						t.Skipf("not contained as in docker mode: %s; see docs/modes.md#kubernetes-mode", why)
					}
					if why, ok := gvisorGaps[a.Name]; ok && underGVisor(m.runner) {
						doc := "docs/modes.md#runtimes"
						if m.mode == sandbox.ModeKubernetes {
							doc = "docs/modes.md#kubernetes-mode"
						}
						t.Skipf("not checked under gVisor: %s; see %s", why, doc)
					}
					if must && m.mode == sandbox.ModeProcess {
						caps := m.runner.Capabilities()
						for _, p := range a.Requires {
							if !caps.Active(p) {
								if os.Getenv("CODE_EXEC_REQUIRE_ISOLATION") == "1" && (os.Geteuid() == 0 || !slices.Contains(rootOnly, p)) {
									t.Fatalf("process mode needs %q to contain this attack, and it is unavailable here", p)
								}
								t.Skipf("process mode needs %q to contain this attack, and it is unavailable on this host", p)
							}
						}
					}
					runAttack(t, a, lang, m, must)
				})
			}
		}
	}
}

// attackLimits are the limits of an attack's run: the suite's, tighter
// (an attack may ask for a longer timeout).
func attackLimits() sandbox.Limits {
	l := sandboxtest.DefaultLimits()
	l.MemoryBytes = 256 << 20
	l.Processes = 64
	l.OpenFiles = 256
	l.OutputBytes = 256 << 10
	l.Timeout = 10 * time.Second
	return l
}

func runAttack(t *testing.T, a attack, lang string, m modeRunner, mustContain bool) {
	tr := setTraps(t, m.host)
	req := sandboxtest.Req(lang, tr.expand(a.Code[lang], m.host))
	req.Limits = attackLimits()
	if a.TimeoutSeconds > 0 {
		req.Limits.Timeout = time.Duration(a.TimeoutSeconds * float64(time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var v *victim
	if a.Victim {
		v = startVictim(t, m)
	}
	res, err := m.runner.Run(ctx, req)
	if err != nil {
		t.Fatalf("the run failed instead of returning a result: %v", err)
	}
	if v != nil && mustContain && !v.ranThrough() {
		t.Fatalf("the victim ended before the attack did, so the case proves nothing: %q", v.wait())
	}
	evidence := tr.escaped(t, res)
	if m.egress && res.Network == nil {
		// The proxy was not there for the run: the case proves nothing.
		t.Errorf("a run with CODE_EXEC_NETWORK=allowlist has no network report")
	}
	if v != nil {
		if d := v.wait(); d != "" {
			evidence = append(evidence, d)
		}
	}
	if mustContain {
		if len(evidence) > 0 {
			t.Errorf("%s escaped in %s mode: %s\nstdout: %.500s\nstderr: %.500s", a.Attack, m.name(), strings.Join(evidence, "; "), res.Stdout, res.Stderr)
		}
		switch a.Expect {
		case "timed_out":
			if !res.TimedOut {
				t.Errorf("expected the timeout to stop the run: %+v", res)
			}
		case "truncated":
			if !res.Truncated || int64(len(res.Stdout)+len(res.Stderr)) > req.Limits.OutputBytes {
				t.Errorf("expected the output cap to stop the run: truncated=%v, %d bytes", res.Truncated, len(res.Stdout)+len(res.Stderr))
			}
		}
	} else if len(evidence) == 0 {
		t.Errorf("%s did not get through in %s mode, so the case proves nothing: stdout %.300q stderr %.300q", a.Attack, m.mode, res.Stdout, res.Stderr)
	}
	// The runner still answers the next request correctly.
	next, err := m.runner.Run(ctx, sandboxtest.Req("python", "print(2**64)"))
	if err != nil || next.Stdout != "18446744073709551616\n" {
		t.Fatalf("the next request after the attack failed: %+v %v", next, err)
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// containmentTable renders docs/modes.md's table of what each mode contains.
func containmentTable(attacks []attack) string {
	var b strings.Builder
	b.WriteString("| attack | languages | docker | process | none | kubernetes |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, a := range attacks {
		cell := func(mode string) string {
			switch {
			case slices.Contains(a.Contained, mode) && mode == "process" && len(a.Requires) > 0:
				return "contained with " + strings.Join(a.Requires, ", ")
			case slices.Contains(a.Contained, mode):
				return "contained"
			case slices.Contains(a.ProvesIn, mode):
				return "**not contained** (tested)"
			}
			return "**not contained**"
		}
		// Kubernetes mode promises docker mode's containment, but for its gaps.
		kube := cell("docker")
		if _, gap := kubernetesGaps[a.Name]; gap {
			kube = "**not contained** as in docker mode (see below)"
		}
		fmt.Fprintf(&b, "| %s (`%s`) | %s | %s | %s | %s | %s |\n", a.Attack, a.Name, strings.Join(sortedKeys(a.Code), ", "), cell("docker"), cell("process"), cell("none"), kube)
	}
	return b.String()
}

const (
	tableBegin = "<!-- containment table: generated by go test ./sandbox -run TestContainmentTable -update -->\n"
	tableEnd   = "<!-- end of containment table -->"
)

// TestContainmentTable keeps docs/modes.md's table in step with the cases.
func TestContainmentTable(t *testing.T) {
	sandboxtest.CheckDocBlock(t, "../docs/modes.md", tableBegin, tableEnd, containmentTable(loadAttacks(t)), *update,
		"go test ./sandbox -run TestContainmentTable -update")
}
