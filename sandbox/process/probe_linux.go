//go:build linux

package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
	"github.com/codeexec/codeexec/sandbox/internal/seccompfilter"
)

// probeIsolation finds which isolation features work on this host, by
// trying them: each feature that fails (alone or with the others) is turned
// off with the reason, and the others stay on. disabled are turned off by
// the operator. uid is the host user that runs are, when the server is
// root. The cgroup and uid-range features are set up by the Runner
// (setUpCgroups, setUpRunUsers).
func (r *Runner) probeIsolation(ctx context.Context, disabled []Feature, uid int) (executor.Isolation, []sandbox.Protection) {
	p := r.wantedIsolation(disabled, uid)
	if err := r.tryIsolation(ctx, p.iso); err != nil {
		r.narrowIsolation(ctx, p)
	}
	p.dependOnMount()
	r.shield = r.hardenServer(&p.iso, p.reason)
	r.checkHardened(ctx, p)
	return p.iso, p.protections()
}

// isolationProbe is the isolation being probed, and why each feature that
// is off is off.
type isolationProbe struct {
	iso    executor.Isolation
	reason map[Feature]string
}

// namespacesBesideUser are the namespaces that need the user namespace
// when the server is not root.
var namespacesBesideUser = []Feature{FeaturePID, FeatureNetwork, FeatureIPC, FeatureUTS, FeatureMount}

// wantedIsolation is the isolation to try first: every feature that the
// operator did not turn off and that the kernel offers, as user uid when
// the server is root.
func (r *Runner) wantedIsolation(disabled []Feature, uid int) *isolationProbe {
	p := &isolationProbe{
		iso:    executor.Isolation{UID: os.Getuid(), GID: os.Getgid(), ReadOnly: readOnlyPaths(r.interp)},
		reason: map[Feature]string{},
	}
	if os.Geteuid() != 0 {
		// Dumpability is process-wide and the last Runner made decides it
		// (see hardenServer). codeexec makes one; a process that makes
		// several (tests, benchmarks) must not keep an earlier one's
		// non-dumpable state, under which no user namespace can be mapped.
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	}
	if os.Geteuid() == 0 {
		p.iso.UID, p.iso.GID = uid, uid
	}
	for _, f := range Features {
		if f == FeatureCgroup || f == FeatureUIDRange {
			continue
		}
		if slices.Contains(disabled, f) {
			p.reason[f] = "turned off by CODE_EXEC_PROCESS_DISABLE"
			continue
		}
		setFeature(&p.iso, f, true)
	}
	if p.iso.Landlock {
		if v, err := executor.LandlockABI(); err != nil || v < 1 {
			p.iso.Landlock = false
			p.reason[FeatureLandlock] = fmt.Sprintf("the kernel does not offer Landlock (%v)", err)
		}
	}
	if p.iso.Seccomp {
		if err := seccompfilter.Available(); err != nil {
			p.iso.Seccomp = false
			p.reason[FeatureSeccomp] = "unavailable on this host (" + err.Error() + "): programs can create user namespaces (and regain every capability inside one, where the host allows them), and use keyrings, bpf, perf events, io_uring and userfaultfd as far as the host allows its users"
		} else {
			// Available assembled it: Program returns it at once.
			p.iso.SeccompFilter, _ = seccompfilter.Program()
		}
	}
	if !p.iso.User && os.Geteuid() != 0 {
		// Without root, every other namespace needs the user namespace.
		p.turnOff(namespacesBesideUser, "needs a user namespace, which is turned off, when the server is not root")
	}
	p.dependOnMount()
	return p
}

// turnOff turns off each of fs that is on, for the reason why.
func (p *isolationProbe) turnOff(fs []Feature, why string) {
	for _, f := range fs {
		if hasFeature(p.iso, f) {
			setFeature(&p.iso, f, false)
			p.reason[f] = why
		}
	}
}

// dependOnMount turns the PID namespace off without the mount namespace.
// Without its own /proc (which needs the mount namespace) a PID namespace
// would still show the host's processes, and Landlock's helper would look
// for /proc/<pid> under the wrong numbers.
func (p *isolationProbe) dependOnMount() {
	if p.iso.PID && !p.iso.Mount {
		p.iso.PID = false
		p.reason[FeaturePID] = "needs the mount namespace (for a /proc of its own), which is " + strings.TrimPrefix(p.reason[FeatureMount], "unavailable on this host: ")
	}
}

// narrowIsolation turns off the features that fail, when the wanted ones
// fail together: the user namespace first, alone, then each other feature
// on its own, then the mount namespace, then everything, rather than fail
// every run.
func (r *Runner) narrowIsolation(ctx context.Context, p *isolationProbe) {
	// The user namespace first, alone: the other features are then tried
	// with it as runs will have it, so that a host without user namespaces
	// does not take Landlock down with them.
	if p.iso.User {
		one := executor.Isolation{User: true, UID: p.iso.UID, GID: p.iso.GID, ReadOnly: p.iso.ReadOnly}
		if err := r.tryIsolation(ctx, one); err != nil {
			p.iso.User = false
			p.reason[FeatureUser] = "unavailable on this host: " + explainNamespaceError(err)
			if os.Geteuid() != 0 {
				p.turnOff(namespacesBesideUser, "needs a user namespace, which is unavailable, when the server is not root")
			}
		}
	}
	// Then each other feature on its own.
	for _, f := range Features {
		if !hasFeature(p.iso, f) || f == FeatureUser {
			continue
		}
		one := p.iso
		for _, g := range Features {
			if g != FeatureUser {
				setFeature(&one, g, g == f)
			}
		}
		if err := r.tryIsolation(ctx, one); err != nil {
			setFeature(&p.iso, f, false)
			p.reason[f] = "unavailable on this host: " + explainNamespaceError(err)
		}
	}
	// Features that work alone but not together: drop the mount
	// namespace, then everything, rather than fail every run.
	if err := r.tryIsolation(ctx, p.iso); err != nil && p.iso.Mount {
		p.iso.Mount = false
		p.reason[FeatureMount] = "fails together with the other features: " + err.Error()
	}
	if err := r.tryIsolation(ctx, p.iso); err != nil {
		p.turnOff(Features, "the features fail together: "+err.Error())
	}
}

// checkHardened is the final check: the chosen features, with the server
// as runs will find it (hardened or not), through the same start-up path
// as a run. When they fail, every feature is turned off and the server
// hardened again for none.
func (r *Runner) checkHardened(ctx context.Context, p *isolationProbe) {
	if !p.iso.Namespaces() && !p.iso.Landlock {
		return
	}
	if err := r.tryIsolation(ctx, p.iso); err != nil {
		p.turnOff(Features, "fails once the server is set up for runs: "+err.Error())
		r.shield = r.hardenServer(&p.iso, p.reason)
	}
}

// protections are the isolation features as sandbox_info lists them, each
// off one with its reason.
func (p *isolationProbe) protections() []sandbox.Protection {
	var ps []sandbox.Protection
	for _, f := range Features {
		if f == FeatureCgroup || f == FeatureUIDRange {
			continue
		}
		pr := sandbox.Protection{Name: protectionName(f), Active: hasFeature(p.iso, f), Detail: featureDetail[f]}
		if !pr.Active {
			pr.Detail = p.reason[f]
			if f == FeatureUser && os.Geteuid() == 0 && pr.Detail == "" {
				pr.Detail = "not needed"
			}
		}
		ps = append(ps, pr)
	}
	return ps
}

// hardenServer keeps the server out of reach of the programs it runs, and
// says how, for sandbox_info. Programs that run as the server's own host user
// could otherwise read /proc/<server>/environ or ptrace the server.
//
// The usual way is to make the server non-dumpable. But an ordinary user's
// server that maps a user namespace for its runs must stay dumpable: the
// server writes the new process's uid_map, and the /proc entries of a
// non-dumpable process's children belong to root. There, the PID namespace
// (the server is not in the run's /proc) or Landlock (no ptrace and no /proc
// access outside the run's own domain) keeps runs from the server; with
// neither of them, the user namespace is turned off (and with it the other
// namespaces, which need it) and the server is made non-dumpable.
func (r *Runner) hardenServer(iso *executor.Isolation, reason map[Feature]string) sandbox.Protection {
	p := sandbox.Protection{Name: "server out of reach", Active: true}
	if os.Geteuid() != 0 && iso.User {
		var by []string
		if iso.PID && iso.Mount {
			by = append(by, "the PID namespace hides it")
		}
		if iso.Landlock {
			by = append(by, "Landlock refuses ptrace and /proc access outside the run")
		}
		if len(by) > 0 {
			p.Detail = "runs cannot read the server's environment or trace it: " + strings.Join(by, "; ") + " (the server stays dumpable: an ordinary user cannot map a user namespace otherwise)"
			return p
		}
		for _, f := range []Feature{FeatureUser, FeaturePID, FeatureNetwork, FeatureIPC, FeatureUTS, FeatureMount} {
			if hasFeature(*iso, f) {
				setFeature(iso, f, false)
				reason[f] = "turned off: without the PID namespace or Landlock, runs could reach the server unless it is non-dumpable, and a non-dumpable server cannot map a user namespace as an ordinary user"
			}
		}
	}
	if err := makeNonDumpable(); err != nil {
		p.Active = false
		p.Detail = "the server could not be made non-dumpable (" + err.Error() + "): code running as the server's user may read its environment"
		return p
	}
	p.Detail = "the server is non-dumpable: code running as its user can neither read its environment nor trace it"
	return p
}

// makeNonDumpable makes the server's own process non-dumpable, so that a
// program running as the same user cannot read /proc/<server>/environ or
// ptrace the server.
func makeNonDumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

// explainNamespaceError turns the errors of a host that refuses namespaces
// into the policy behind them.
func explainNamespaceError(err error) string {
	switch {
	case errors.Is(err, unix.ENOSPC):
		return "the host allows no (more) namespaces of this kind, as with user.max_user_namespaces=0 (" + err.Error() + ")"
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return "the host forbids it, for example through kernel.unprivileged_userns_clone=0, an AppArmor or seccomp policy, or a container runtime (" + err.Error() + ")"
	}
	return err.Error()
}

// tryIsolation runs /bin/true under iso, as a run would.
func (r *Runner) tryIsolation(ctx context.Context, iso executor.Isolation) error {
	truePath := ""
	for _, p := range []string{"/usr/bin/true", "/bin/true"} {
		if _, err := os.Stat(p); err == nil {
			truePath = p
			break
		}
	}
	if truePath == "" {
		return errors.New("no /usr/bin/true to probe with")
	}
	var cred *executor.Credential
	if !iso.User {
		cred = r.cred
	}
	if r.uids != nil {
		// Probes run as a run user of their own too, never as one that a
		// run (of this server or another) holds.
		lease, err := r.uids.acquire(ctx)
		if err != nil {
			return err
		}
		defer lease.release()
		if iso.User {
			iso.UID, iso.GID = lease.uid, lease.uid
		} else {
			cred = &executor.Credential{UID: uint32(lease.uid), GID: uint32(lease.uid)}
		}
	}
	dir, err := os.MkdirTemp(r.root, "probe-")
	if err != nil {
		return err
	}
	defer executor.RemoveAll(dir)
	if iso.User {
		_ = os.Chown(dir, iso.UID, iso.GID)
	} else if cred != nil {
		_ = os.Chown(dir, int(cred.UID), int(cred.GID))
	}
	if iso.Mount {
		root, err := os.MkdirTemp(r.root, "probe-root-")
		if err != nil {
			return err
		}
		defer executor.RemoveAll(root)
		if iso.User {
			_ = os.Chown(root, iso.UID, iso.GID)
		}
		iso.RootDir = root
	}
	res := &sandbox.Result{}
	lim := sandbox.Limits{Timeout: 10 * time.Second, OutputBytes: 4096, MemoryBytes: 64 << 20, Processes: 16, OpenFiles: 64, FileSizeBytes: 1 << 20}
	var procs []*os.File
	if r.cgroups != nil {
		cg, err := r.cgroups.create("probe-"+strconv.FormatInt(runSeq.Add(1), 10), lim)
		if err != nil {
			return err
		}
		defer cg.remove()
		procs = cg.procs
	}
	err = executor.Spawn(ctx, executor.Spec{Path: truePath, Env: minimalEnv(dir, executor.MinimalPath), Dir: dir, Limits: lim, Rlimits: true, Credential: cred, NoNewPrivs: true, Isolation: iso, CgroupProcs: procs}, res)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(res.Stderr)
		if msg == "" {
			msg = fmt.Sprintf("exit code %d", res.ExitCode)
		}
		return errors.New(msg)
	}
	return nil
}

// readOnlyPaths are the host paths a run sees read-only: the system
// directories, and the directory of any interpreter that lives elsewhere.
func readOnlyPaths(interp map[string]sandbox.Interpreter) []string {
	paths := slices.Clone(systemDirs)
	for _, in := range interp {
		inside := false
		for _, d := range systemDirs {
			if strings.HasPrefix(in.Path, d+"/") {
				inside = true
			}
		}
		if dir := filepath.Dir(in.Path); !inside && !slices.Contains(paths, dir) {
			paths = append(paths, dir)
		}
	}
	return paths
}
