package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
)

// probeLimits bound the one pod that New runs to find out what runs get.
var probeLimits = sandbox.Limits{
	Timeout:       60 * time.Second,
	MemoryBytes:   256 << 20,
	CPUs:          0.25,
	Processes:     64,
	OpenFiles:     256,
	FileSizeBytes: 16 << 20,
	OutputBytes:   256 << 10,
}

// connectTimeout bounds each connection the probe pod tries.
const connectTimeout = 3 * time.Second

// metadataAddr is where clouds serve their metadata service (and the
// credentials it hands out).
const metadataAddr = "169.254.169.254:80"

// probeTarget is a destination the probe pod tries to reach; a run pod
// must reach none.
type probeTarget struct {
	What   string `json:"what"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Result string `json:"result,omitempty"` // "connected", or why not
}

func (t probeTarget) addr() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

// probeFacts is what the probe pod and the API server told at start.
type probeFacts struct {
	uid        string
	uidMap     string // /proc/self/uid_map's first line
	seccomp    string // "2": a filter
	noNewPrivs string // "1"
	capEff     string
	saToken    bool   // a service account token was mounted
	rootRW     bool   // the root filesystem could be written
	tmp        string // /tmp's mount: "<fs type> <options>"
	tmpKiB     int64  // /tmp's size, as statfs gives it (df)
	shm        string // /dev/shm's mount, as tmp
	shmKiB     int64  // /dev/shm's size, as tmpKiB
	kernel     string // the kernel's release (uname -r): gVisor's ends in -gvisor
	nofile     string
	fsize      string // ulimit -f (blocks of 512 bytes)
	nproc      string // ulimit -p
	memory     string // the container's memory limit, as its cgroup says
	cpu        string // its CPU quota, as its cgroup says
	pids       string // the pids limit of its cgroup ("max": none)
	env        []string
	procs      int // processes the probe saw in /proc

	network   []probeTarget
	reached   []probeTarget
	listener  string // where the server listened for the probe
	accepted  int32  // connections that listener accepted
	netSkip   []string
	podSec    bool   // the namespace refuses pods that are not "restricted"
	podSecMsg string // what the API server said to the dry run
	version   string // the API server's version
}

// kubeProbeScript is the probe pod's program: it reads the network targets
// (JSON) from the first line of its stdin, then prints runproto's probe of
// the image and what a pod gets: its user, seccomp mode, capabilities,
// service account token, root filesystem, /tmp, limits, environment, the
// processes it sees, and which targets it reached.
func kubeProbeScript(enabled []string) string {
	return "IFS= read -r targets || targets='[]'\n" + runproto.ProbeScript(enabled) + `
echo "@@k8s-uidmap $(tr -s ' ' < /proc/self/uid_map | head -n1)"
while read -r k v; do case "$k" in Seccomp:|NoNewPrivs:|CapEff:) echo "@@k8s-status $k $v";; esac; done < /proc/self/status
for d in /var/run/secrets/kubernetes.io /run/secrets/kubernetes.io; do if [ -e "$d" ]; then echo '@@k8s-satoken'; break; fi; done
if ( : > /codeexec-probe ) 2>/dev/null; then echo '@@k8s-rootrw'; rm -f /codeexec-probe; fi
while read -r _ m fs o _; do case "$m" in /tmp) echo "@@k8s-tmp $fs $o";; /dev/shm) echo "@@k8s-shm $fs $o";; esac; done < /proc/mounts
echo "@@k8s-sizes $(df -Pk /tmp /dev/shm 2>/dev/null | awk 'NR > 1 {printf "%s ", $2}')"
echo "@@k8s-kernel $(uname -r)"
echo "@@k8s-ulimit $(ulimit -n) $(ulimit -f) $(ulimit -p)"
for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do if [ -r "$f" ]; then echo "@@k8s-memory $(cat "$f")"; break; fi; done
if [ -r /sys/fs/cgroup/cpu.max ]; then echo "@@k8s-cpu $(cat /sys/fs/cgroup/cpu.max)"
elif [ -r /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then echo "@@k8s-cpu $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"; fi
for f in /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max; do if [ -r "$f" ]; then echo "@@k8s-pids $(cat "$f")"; break; fi; done
env | while IFS='=' read -r k _; do echo "@@k8s-env $k"; done
n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo "@@k8s-procs $n"
if p=$(command -v python3); then "$p" -I -B -c ` + runproto.ShellQuote(netProbe) + ` "$targets"; fi
exit 0
`
}

// netProbe tries every target at once (and the API server's Service as
// pods see it), and prints what happened to each.
var netProbe = `import json, os, socket, sys, threading
ts = json.loads(sys.argv[1])
h, p = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
if h and p and p.isdigit():
    ts.append({"what": "the API server's Service, as every pod finds it (KUBERNETES_SERVICE_HOST)", "host": h, "port": int(p)})
def check(t):
    try:
        s = socket.socket(socket.AF_INET6 if ":" in t["host"] else socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(` + strconv.Itoa(int(connectTimeout/time.Second)) + `)
        try:
            s.connect((t["host"], t["port"]))
            t["result"] = "connected"
        finally:
            s.close()
    except socket.timeout:
        t["result"] = "timed out"
    except OSError as e:
        t["result"] = e.strerror or str(e)
th = [threading.Thread(target=check, args=(t,)) for t in ts]
for t in th:
    t.start()
for t in th:
    t.join()
print("@@k8s-net " + json.dumps(ts))
`

// probe runs the probe pod and learns from it which interpreters the image
// has and what protections a pod gets; it refuses, unless
// Config.NetworkCheck says warn, a pod that reached anything.
func (r *Runner) probe(ctx context.Context) error {
	targets, ln, skipped, err := r.networkTargets()
	if err != nil {
		return err
	}
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	defer ln.Close()
	tj, _ := json.Marshal(targets)

	spec := podSpec{
		role:     roleProbe,
		cmd:      []string{"/bin/sh", "-c", ulimits(probeLimits) + kubeProbeScript(r.cfg.Languages), "codeexec-probe"},
		limits:   containerLimits(probeLimits),
		deadline: runDeadline(time.Now(), probeLimits.Timeout),
	}
	s, err := r.start(ctx, spec)
	if err != nil {
		return fmt.Errorf("kubernetes: probing the image %s: %w", r.cfg.Image, err)
	}
	res, err, _ := r.exchange(ctx, s, strings.NewReader(string(tj)+"\n"), probeLimits, nil, nil, false)
	r.discard(s)
	if err != nil {
		return fmt.Errorf("kubernetes: probing the image %s: %w", r.cfg.Image, err)
	}
	if res.ExitCode != 0 || res.TimedOut {
		return fmt.Errorf("kubernetes: %w: the probe pod of %s failed (exit %d): %s", sandbox.ErrSandboxUnavailable, r.cfg.Image, res.ExitCode, strings.TrimSpace(res.Stderr+res.Stdout))
	}
	p := runproto.ParseProbe(res.Stdout, r.cfg.Image, r.cfg.Languages)
	if p.UID == "" {
		return fmt.Errorf("kubernetes: %w: the probe pod of %s printed no uid: %s", sandbox.ErrSandboxUnavailable, r.cfg.Image, strings.TrimSpace(res.Stderr))
	}
	if !p.EnvDefaultSignal {
		return fmt.Errorf("kubernetes: %w: the image %s lacks env --default-signal (GNU coreutils 8.31 or newer), which the run supervisor needs; rebuild it with docker/build-sandbox-image.sh", sandbox.ErrSandboxUnavailable, r.cfg.Image)
	}
	if p.PackagesErr != nil {
		r.log.Warn("could not tell which python packages the image has", "err", p.PackagesErr)
	}
	r.interps = p.Interpreters
	r.python = p.Python3
	f := &r.facts
	f.uid = p.UID
	f.listener, f.netSkip = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), skipped
	if err := f.parse(p.Other); err != nil {
		return fmt.Errorf("kubernetes: %w: the probe pod of %s: %v", sandbox.ErrSandboxUnavailable, r.cfg.Image, err)
	}
	f.accepted = accepted.Load()
	r.langs = p.Languages

	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	f.podSec, f.podSecMsg = r.podSecurity(actx)
	f.version = r.serverVersion(actx)

	for _, t := range f.network {
		if t.Result == "connected" {
			f.reached = append(f.reached, t)
		}
	}
	if f.accepted > 0 && len(f.reached) == 0 {
		f.reached = append(f.reached, probeTarget{What: "this server's probe listener (it accepted a connection)", Result: "connected"})
	}
	if len(f.reached) > 0 {
		var what []string
		for _, t := range f.reached {
			what = append(what, fmt.Sprintf("%s at %s", t.What, t.addr()))
		}
		msg := fmt.Sprintf("a pod in namespace %s reached %s: runs there are not cut off from the network", r.cfg.Namespace, strings.Join(what, "; "))
		if r.cfg.NetworkCheck != NetworkWarn {
			return fmt.Errorf("kubernetes: %w: %s; apply a deny-all NetworkPolicy to the namespace (deploy/kubernetes/networkpolicy.yaml) on a cluster whose network plugin enforces it, or set CODE_EXEC_K8S_NETWORK_CHECK=warn to start anyway", sandbox.ErrSandboxUnavailable, msg)
		}
		r.log.Warn("!!! " + msg + " (CODE_EXEC_K8S_NETWORK_CHECK=warn) !!!")
	}
	return nil
}

// parse reads the probe pod's own lines.
func (f *probeFacts) parse(lines []string) error {
	gotNet := false
	for _, line := range lines {
		key, val, _ := strings.Cut(line, " ")
		switch key {
		case "@@k8s-uidmap":
			f.uidMap = val
		case "@@k8s-status":
			k, v, _ := strings.Cut(val, " ")
			switch k {
			case "Seccomp:":
				f.seccomp = strings.TrimSpace(v)
			case "NoNewPrivs:":
				f.noNewPrivs = strings.TrimSpace(v)
			case "CapEff:":
				f.capEff = strings.TrimSpace(v)
			}
		case "@@k8s-satoken":
			f.saToken = true
		case "@@k8s-rootrw":
			f.rootRW = true
		case "@@k8s-tmp":
			f.tmp = val
		case "@@k8s-shm":
			f.shm = val
		case "@@k8s-sizes":
			if s := strings.Fields(val); len(s) == 2 {
				f.tmpKiB, _ = strconv.ParseInt(s[0], 10, 64)
				f.shmKiB, _ = strconv.ParseInt(s[1], 10, 64)
			}
		case "@@k8s-kernel":
			f.kernel = val
		case "@@k8s-ulimit":
			if u := strings.Fields(val); len(u) == 3 {
				f.nofile, f.fsize, f.nproc = u[0], u[1], u[2]
			}
		case "@@k8s-memory":
			f.memory = val
		case "@@k8s-cpu":
			f.cpu = val
		case "@@k8s-pids":
			f.pids = val
		case "@@k8s-env":
			f.env = append(f.env, val)
		case "@@k8s-procs":
			f.procs, _ = strconv.Atoi(val)
		case "@@k8s-net":
			if err := json.Unmarshal([]byte(val), &f.network); err != nil {
				return fmt.Errorf("its network report cannot be read: %v", err)
			}
			gotNet = true
		}
	}
	if !gotNet {
		return fmt.Errorf("it made no network report: the network probe needs python3 in the image")
	}
	return nil
}

// networkTargets are what the probe pod must not reach: the API server as
// this server reaches it, this server itself (on each of its addresses but
// loopback, at a port it opens for the probe: ln), a cloud's metadata
// service, and Config.NetworkCheckAddrs. skipped says what was left out.
func (r *Runner) networkTargets() (targets []probeTarget, ln net.Listener, skipped []string, err error) {
	if u, perr := url.Parse(r.c.Config.Host); perr == nil && u.Hostname() != "" {
		port, _ := strconv.Atoi(u.Port())
		if port == 0 {
			port = 443
			if u.Scheme == "http" {
				port = 80
			}
		}
		if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() {
			skipped = append(skipped, fmt.Sprintf("the API server at %s (a loopback address: in a pod it is the pod's own)", r.c.Config.Host))
		} else {
			targets = append(targets, probeTarget{What: "the API server (as this server reaches it)", Host: u.Hostname(), Port: port})
		}
	}
	ln, err = net.Listen("tcp", ":0")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubernetes: opening a port for the network probe: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsUnspecified() || ipn.IP.IsMulticast() || (ipn.IP.To4() == nil && ipn.IP.IsLinkLocalUnicast()) {
			continue
		}
		targets = append(targets, probeTarget{What: "this server", Host: ipn.IP.String(), Port: port})
	}
	mh, mp, _ := net.SplitHostPort(metadataAddr)
	mport, _ := strconv.Atoi(mp)
	targets = append(targets, probeTarget{What: "a cloud's metadata service", Host: mh, Port: mport})
	for _, a := range r.cfg.NetworkCheckAddrs {
		h, p, err := net.SplitHostPort(a)
		n, perr := strconv.Atoi(p)
		if err != nil || perr != nil || n <= 0 || n > 65535 {
			_ = ln.Close()
			return nil, nil, nil, fmt.Errorf("kubernetes: CODE_EXEC_K8S_NETWORK_CHECK_ADDRS entry %q is not host:port", a)
		}
		targets = append(targets, probeTarget{What: "an address of CODE_EXEC_K8S_NETWORK_CHECK_ADDRS", Host: h, Port: n})
	}
	return targets, ln, skipped, nil
}

// podSecurity asks the API server, with a dry run, to create a pod that
// runs as root and may gain privileges: a namespace that enforces Pod
// Security "restricted" refuses it.
func (r *Runner) podSecurity(ctx context.Context) (bool, string) {
	p := r.podObject(newPodName("psa-check"), podSpec{role: roleProbe, cmd: []string{"true"}, limits: containerLimits(probeLimits), deadline: time.Now().Add(time.Minute)})
	p.Spec.SecurityContext.RunAsNonRoot, p.Spec.SecurityContext.RunAsUser = ptr(false), ptr(int64(0))
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(true), RunAsNonRoot: ptr(false)}
	_, err := r.c.Pods.Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return false, "the API server accepted (in a dry run) a pod running as root that may gain privileges in namespace " + r.cfg.Namespace
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PodSecurity"):
		return true, "the API server refuses (in a dry run) a pod running as root that may gain privileges in namespace " + r.cfg.Namespace + ": it enforces Pod Security \"restricted\""
	}
	return false, "could not tell (the dry run failed: " + err.Error() + ")"
}

// serverVersion is the API server's version, "" when it does not say.
func (r *Runner) serverVersion(ctx context.Context) string {
	raw, err := r.c.Core.Get().AbsPath("/version").DoRaw(ctx)
	if err != nil {
		return ""
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	_ = json.Unmarshal(raw, &v)
	return v.GitVersion
}
