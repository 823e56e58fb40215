package kube

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
)

// unavailable is what kubernetes mode does not offer yet; sandbox_info says
// so among the warnings, and the server refuses these settings at start.
const unavailable = "kubernetes mode refuses CODE_EXEC_PACKAGES=true and CODE_EXEC_WORKSPACE at start: runs and sessions have no packages beyond the image's and no workspace"

// capabilities describes the protections in force, as the probe pod saw
// them: each is checked, not assumed.
func (r *Runner) capabilities() sandbox.Capabilities {
	f := r.facts
	lim := probeLimits
	nonRoot := f.uid != "" && f.uid != "0"
	capsDropped := strings.Trim(f.capEff, "0") == "" && f.capEff != ""
	gvisor := isGVisor(f.kernel)
	// A tmpfs with a size, or (under gVisor, whose gofer serves the node's
	// tmpfs as 9p) a filesystem that statfs says is no larger than the cap.
	tmpCapped := (strings.HasPrefix(f.tmp, "tmpfs ") && strings.Contains(f.tmp, "size=")) || (f.tmpKiB > 0 && f.tmpKiB<<10 <= lim.FileSizeBytes)
	userns := f.uidMap != "" && !strings.HasPrefix(f.uidMap, " 0 0 4294967295") && !strings.HasPrefix(f.uidMap, "0 0 4294967295")
	netOK := len(f.reached) == 0
	ps := []sandbox.Protection{
		{Name: "fresh pod per run", Active: true, Detail: "each run gets a new pod of " + r.cfg.Image + " in namespace " + r.cfg.Namespace + " that has run nothing before, deleted after the run; each session a pod of its own, locked down the same way (role " + roleSession + "), whose calls reach its supervisor over pods/exec, deleted when the session ends; Kubernetes places them, codeexec never chooses a node"},
		{Name: "warm pool", Active: r.cfg.PoolSize > 0, Detail: poolDetail(r.cfg.PoolSize)},
		{Name: "network", Active: netOK, Detail: r.networkDetail()},
		{Name: "read-only root filesystem", Active: !f.rootRW, Detail: checked(!f.rootRW, "the probe pod could not write to /", "the probe pod wrote to /")},
		{Name: "size-capped /tmp", Active: tmpCapped, Detail: tmpDetail(f, lim)},
		{Name: "non-root user", Active: nonRoot, Detail: "each pod runs as a uid of its own, drawn from " + strconv.Itoa(runUIDFirst) + "-" + strconv.Itoa(runUIDLast) + " (the probe pod ran as uid " + f.uid + "); runAsNonRoot"},
		{Name: "capabilities dropped", Active: capsDropped, Detail: "capabilities drop ALL (the probe pod's CapEff: " + orNone(f.capEff) + ")"},
		{Name: "no privilege escalation", Active: f.noNewPrivs == "1", Detail: "allowPrivilegeEscalation: false (the probe pod's NoNewPrivs: " + orNone(f.noNewPrivs) + ")"},
		{Name: "seccomp", Active: f.seccomp == "2", Detail: seccompDetail(f.seccomp, gvisor)},
		{Name: "no service account token", Active: !f.saToken, Detail: checked(!f.saToken, "automountServiceAccountToken: false; the probe pod had no token", "the probe pod had a service account token mounted")},
		{Name: "memory limit", Active: f.memory != "" && f.memory != "max" && f.memory == strconv.FormatInt(lim.MemoryBytes, 10), Detail: "requests = limits; the probe pod's memory cgroup limit: " + orNone(f.memory) + "; an OOM kill is reported as oom_killed"},
		{Name: "cpu limit", Active: cpuLimited(f.cpu), Detail: "requests = limits; the probe pod's CPU quota: " + orNone(f.cpu)},
		{Name: "pids limit", Active: f.nproc == strconv.Itoa(lim.Processes), Detail: "RLIMIT_NPROC of the pod's own uid (ulimit -p; the probe pod's: " + orNone(f.nproc) + "): Kubernetes has no per-pod process limit; the pod's pids cgroup allows " + orNone(f.pids) + " (the node's podPidsLimit)" +
			ifElse(gvisor, "; under gVisor, gVisor's kernel counts the limit among the pod's own processes and threads, and the pids cgroup counts gVisor's own threads on the node", "")},
		{Name: "open files limit", Active: f.nofile == strconv.Itoa(lim.OpenFiles), Detail: "ulimit -n (the probe pod's: " + orNone(f.nofile) + ")"},
		{Name: "file size limit", Active: f.fsize == strconv.FormatInt((lim.FileSizeBytes+511)/512, 10), Detail: "ulimit -f (the probe pod's: " + orNone(f.fsize) + " blocks of 512 bytes)"},
		{Name: "environment scrubbed", Active: true, Detail: "the pod's environment is its specification's (PATH, HOME, LANG and TMPDIR), the image's own variables and what Kubernetes adds to every container (HOSTNAME, the API server's Service address in KUBERNETES_SERVICE_* and KUBERNETES_PORT*)" + ifElse(r.cfg.Egress != nil, ", and the proxy variables of CODE_EXEC_NETWORK=allowlist (HTTP_PROXY, HTTPS_PROXY, their lower-case forms, NO_PROXY empty, NODE_USE_ENV_PROXY=1)", "") + "; no service links; the server's environment is never passed on (the probe pod saw: " + strings.Join(f.env, ", ") + ")"},
		{Name: "own process namespace", Active: f.procs > 0 && f.procs < 16, Detail: fmt.Sprintf("the pod's processes alone (the probe pod saw %d in /proc)", f.procs)},
		{Name: "pod security restricted", Active: f.podSec, Detail: f.podSecMsg},
		{Name: "runtime class", Active: r.cfg.RuntimeClass != "", Detail: runtimeDetail(r.cfg.RuntimeClass, f.kernel)},
		{Name: "user namespace", Active: userns, Detail: usernsDetail(r.cfg.UserNamespaces, f.uidMap)},
		{Name: "container logs off", Active: false, Detail: "the node's kubelet keeps each pod's output in its log until the pod is deleted, at the end of the run"},
		{Name: "leftovers removed", Active: true, Detail: "every pod carries " + LabelManagedBy + "=" + ManagedBy + ", " + LabelReplica + " and an owner reference to the replica's Lease (renewed every " + leaseRenew.String() + "); a sweeper, at start and every " + sweepEvery.String() + ", deletes the pods of replicas whose Lease is stale or gone and pods past their deadline"},
		{Name: "cluster", Active: true, Detail: fmt.Sprintf("Kubernetes %s at %s (from %s)", orNone(f.version), r.c.Config.Host, r.c.Source)},
	}
	warnings := []string{unavailable}
	if !netOK {
		warnings = append(warnings, "runs are NOT cut off from the network: a probe pod reached "+reachedList(f.reached)+" (CODE_EXEC_K8S_NETWORK_CHECK=warn)")
	}
	if !f.podSec {
		warnings = append(warnings, "namespace "+r.cfg.Namespace+" does not enforce Pod Security \"restricted\": "+f.podSecMsg)
	}
	if !nonRoot {
		warnings = append(warnings, "code runs as root inside the pod")
	}
	return sandbox.Capabilities{
		Mode: sandbox.ModeKubernetes,
		Isolation: sandbox.Isolation{
			Network:     netOK,
			Filesystem:  !f.rootRW && tmpCapped,
			Identity:    nonRoot && capsDropped,
			Environment: true,
			Processes:   f.procs > 0 && f.procs < 16,
		},
		Summary: "a fresh pod per run on a Kubernetes cluster (namespace " + r.cfg.Namespace + "): " + ifElse(netOK, "no network reached by the probe", "network NOT isolated") + ifElse(r.cfg.Egress != nil, " (the allowlist only through codeexec's egress proxy)", "") +
			", read-only root filesystem except a size-capped /tmp, a non-root uid of its own, all capabilities dropped, no privilege escalation, seccomp, memory, CPU, process and open-file limits; deleted after the run",
		Languages:   r.langs,
		Protections: ps,
		Warnings:    warnings,
		Egress:      r.egressInfo(),
	}
}

func (r *Runner) networkDetail() string {
	f := r.facts
	var b strings.Builder
	if len(f.reached) == 0 {
		b.WriteString("none: at start a probe pod, placed like a run's, tried to reach ")
	} else {
		b.WriteString("NOT isolated: at start a probe pod, placed like a run's, tried to reach ")
	}
	var tried []string
	for _, t := range f.network {
		tried = append(tried, fmt.Sprintf("%s at %s (%s)", t.What, t.addr(), t.Result))
	}
	b.WriteString(strings.Join(tried, "; "))
	if f.accepted > 0 {
		fmt.Fprintf(&b, "; this server's probe port accepted %d connections", f.accepted)
	}
	if len(f.netSkip) > 0 {
		b.WriteString("; not tried: " + strings.Join(f.netSkip, "; "))
	}
	b.WriteString(". Kubernetes has no per-pod switch for the network: a deny-all NetworkPolicy, enforced by the cluster's network plugin, keeps runs off it; the pod has no cluster DNS (dnsPolicy None)")
	b.WriteString(r.egressDetail())
	return b.String()
}

func reachedList(ts []probeTarget) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.What+" at "+t.addr())
	}
	return strings.Join(s, ", ")
}

func cpuLimited(cpu string) bool {
	f := strings.Fields(cpu)
	return len(f) == 2 && f[0] != "max" && f[0] != "-1"
}

func runtimeDetail(rc, kernel string) string {
	if rc == "" {
		return "none: the cluster's default runtime (CODE_EXEC_K8S_RUNTIME_CLASS sets one, such as gvisor)"
	}
	d := "runtimeClassName " + rc + " (the probe pod ran under it, on kernel release " + orNone(kernel) + ")"
	if isGVisor(kernel) {
		d += ": gVisor, a kernel in user space between the program and the node's kernel. What differs from runc: a program can kill its pod's PID 1 " +
			"(the run then ends with an error, not a result; nothing outlives the pod), /dev/shm is gVisor's own tmpfs (see size-capped /tmp), " +
			"and /proc does not show a program's blocked and ignored signals"
	}
	return d
}

func seccompDetail(mode string, gvisor bool) string {
	d := "seccompProfile RuntimeDefault, the container runtime's default profile (the probe pod's seccomp mode: " + orNone(mode) + ", 2 is a filter)"
	switch {
	case gvisor && mode == "2":
		d += "; under gVisor, as gVisor's kernel reports it: the profile filters the program's calls inside gVisor (runsc --oci-seccomp), and gVisor confines its own calls to the node's kernel"
	case gvisor:
		d += "; under gVisor, as gVisor's kernel reports it: runsc applies the pod's profile only with --oci-seccomp (gVisor still confines its own calls to the node's kernel)"
	}
	return d
}

// isGVisor reports whether kernel, a release as uname -r gives it, is
// gVisor's (4.19.0-gvisor, unless runsc was told to say otherwise).
func isGVisor(kernel string) bool { return strings.HasSuffix(kernel, "-gvisor") }

// tmpDetail says how /tmp and /dev/shm are capped, as the probe pod found
// them: /dev/shm is the pod's emptyDir under runc, and gVisor's own tmpfs,
// not capped by size, under gVisor.
func tmpDetail(f probeFacts, lim sandbox.Limits) string {
	d := "/tmp is a memory-backed emptyDir sized by the file size limit (the probe pod's: " + orNone(f.tmp) + fmt.Sprintf(", %d KiB", f.tmpKiB)
	if strings.HasPrefix(f.tmp, "9p ") {
		d += "; the node's tmpfs, served by gVisor's gofer"
	}
	shm := min(int64(shmMax), lim.FileSizeBytes)
	if f.shmKiB > 0 && f.shmKiB<<10 <= shm {
		return d + "); /dev/shm is capped at the same size or 64 MiB; both count against the pod's memory limit"
	}
	return d + fmt.Sprintf("); /dev/shm is NOT capped by size (the probe pod's: %s, %d KiB", orNone(f.shm), f.shmKiB) +
		ifElse(isGVisor(f.kernel), ": gVisor mounts a tmpfs of its own there, not the pod's emptyDir", "") +
		"), only by the pod's memory limit: filling it ends the run as OOM-killed; both count against the pod's memory limit"
}

func usernsDetail(asked bool, uidMap string) string {
	switch {
	case asked:
		return "hostUsers: false (the probe pod's uid map: " + orNone(uidMap) + ")"
	}
	return "off (CODE_EXEC_K8S_USER_NAMESPACES=true asks for hostUsers: false, which needs a node that supports it)"
}

func poolDetail(size int) string {
	if size <= 0 {
		return "off (CODE_EXEC_K8S_POOL_SIZE=0): each run waits for its pod to be scheduled and started"
	}
	return fmt.Sprintf("%d pods per language per replica are made, started and attached ahead of demand, locked down exactly like the others, "+
		"with the interpreter loaded and waiting for a program; each serves one run and is then deleted", size)
}

func checked(ok bool, yes, no string) string { return ifElse(ok, yes, no) }

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func ifElse(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}
