package process

import (
	"fmt"
	"slices"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// Feature names one kernel isolation measure of process mode. Each one is
// probed at start and degrades on its own: a host that cannot give one still
// gets the others.
type Feature string

// The kernel isolation features, in the order they are applied.
const (
	// FeatureUser is a user namespace, needed for the other namespaces when
	// the server is not root; the program keeps no capability in it.
	FeatureUser Feature = "user"
	// FeaturePID is a PID namespace: the program sees only its own
	// processes, and they all die with the run.
	FeaturePID Feature = "pid"
	// FeatureNetwork is a network namespace with only an isolated loopback.
	FeatureNetwork Feature = "network"
	// FeatureIPC is an IPC namespace (System V IPC, POSIX message queues).
	FeatureIPC Feature = "ipc"
	// FeatureUTS is a UTS namespace (the hostname).
	FeatureUTS Feature = "uts"
	// FeatureMount is a mount namespace with a minimal root: the system's
	// programs and libraries read-only, the run directory writable, a
	// private /tmp, and nothing else of the host (no home directories, no
	// /root, no Docker socket).
	FeatureMount Feature = "mount"
	// FeatureLandlock restricts file access with Landlock: read-only system
	// directories, a writable run directory, nothing else.
	FeatureLandlock Feature = "landlock"
	// FeatureSeccomp is a seccomp filter in the spirit of Docker's default
	// profile (no new namespaces, keyrings, bpf, io_uring, mounts, ...).
	FeatureSeccomp Feature = "seccomp"
	// FeatureCgroup gives each run a memory and pids cgroup of its own
	// (root, or a delegated cgroup v2 subtree).
	FeatureCgroup Feature = "cgroup"
	// FeatureUIDRange runs each run in flight as a host user of its own,
	// from CODE_EXEC_PROCESS_UID_RANGE (root only).
	FeatureUIDRange Feature = "uid-range"
)

// Features lists every kernel isolation feature.
var Features = []Feature{FeatureUser, FeaturePID, FeatureNetwork, FeatureIPC, FeatureUTS, FeatureMount, FeatureLandlock, FeatureSeccomp, FeatureCgroup, FeatureUIDRange}

// ParseFeatures reads a list of feature names (as in CODE_EXEC_PROCESS_DISABLE).
func ParseFeatures(names []string) ([]Feature, error) {
	var out []Feature
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" {
			continue
		}
		f := Feature(n)
		if !slices.Contains(Features, f) && f != FeatureSeatbelt {
			return nil, fmt.Errorf("unknown process isolation feature %q (known: %s)", n, featureList(append(slices.Clone(Features), FeatureSeatbelt)))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

func featureList(fs []Feature) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

// featureField is the switch of feature f in iso (nil for an unknown feature).
func featureField(iso *executor.Isolation, f Feature) *bool {
	switch f {
	case FeatureUser:
		return &iso.User
	case FeaturePID:
		return &iso.PID
	case FeatureNetwork:
		return &iso.Network
	case FeatureIPC:
		return &iso.IPC
	case FeatureUTS:
		return &iso.UTS
	case FeatureMount:
		return &iso.Mount
	case FeatureLandlock:
		return &iso.Landlock
	case FeatureSeccomp:
		return &iso.Seccomp
	}
	return nil
}

// hasFeature reports whether feature f is on in iso.
func hasFeature(iso executor.Isolation, f Feature) bool {
	p := featureField(&iso, f)
	return p != nil && *p
}

// setFeature turns feature f on or off in iso.
func setFeature(iso *executor.Isolation, f Feature, on bool) {
	if p := featureField(iso, f); p != nil {
		*p = on
	}
}

// systemDirs are the host directories a minimal root shows read-only, when
// they exist: programs, libraries and configuration, nothing personal.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// featureDetail says what each feature protects, for sandbox_info.
var featureDetail = map[Feature]string{
	FeatureUser:     "user namespace: the program holds no capability, on the host or inside",
	FeaturePID:      "PID namespace: the program sees only its own processes (not the server's), and they all die with the run",
	FeatureNetwork:  "network namespace: no network but an isolated loopback; no host service, no DNS, no internet",
	FeatureIPC:      "IPC namespace: no shared memory or message queues with the host",
	FeatureUTS:      "UTS namespace: its own hostname",
	FeatureMount:    "mount namespace: system directories read-only, the run directory writable, a private /tmp; home directories, /root, /run and the Docker socket are absent",
	FeatureLandlock: "Landlock: file access limited to read-only system directories and the writable run directory",
	FeatureSeccomp:  "seccomp filter like Docker's default profile: no new namespaces (clone3 answers ENOSYS so the C library uses clone, whose flags are checked), no setns, keyrings, bpf, perf_event_open, io_uring, userfaultfd, kernel modules, kexec, mounts, ptrace; and no nested namespaces in the run's user namespace (user.max_*_namespaces=0)",
	FeatureCgroup:   "a memory and pids cgroup per run: memory counts every process of the run together (shared memory, memfds and tmpfs pages included), an OOM kill is reported as oom_killed, and whatever is left of a run is swept from its cgroup",
}

// linuxOnlyProtections are the kernel isolation features, each listed as
// unavailable: they need Linux. (The cgroup and the uid range are the
// Runner's to list.)
func linuxOnlyProtections() []sandbox.Protection {
	var ps []sandbox.Protection
	for _, f := range Features {
		if f == FeatureCgroup || f == FeatureUIDRange {
			continue // set up by the Runner
		}
		ps = append(ps, sandbox.Protection{Name: protectionName(f), Detail: "needs Linux"})
	}
	return ps
}

// notShielded is the "server out of reach" protection where nothing keeps
// runs from the server (outside Linux).
func notShielded() sandbox.Protection {
	return sandbox.Protection{Name: "server out of reach", Detail: "needs Linux: code runs as the server's own user and may read its environment"}
}
