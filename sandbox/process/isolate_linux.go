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
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/codeexec/codeexec/sandbox"
)

// ctlFD is the supervisor's end of the control pipe (see startSupervisor).
const ctlFD = 5

// exeFD is the descriptor on which the supervisor and the exec stage find
// the codeexec binary when the run is isolated: they re-execute it as
// /proc/self/fd/6, which works whoever they run as and whatever root they see.
const exeFD = 6

// cloneFlags returns the namespaces a supervisor is started in.
func cloneFlags(iso Isolation) uintptr {
	var f uintptr
	if iso.User {
		f |= unix.CLONE_NEWUSER
	}
	if iso.PID {
		f |= unix.CLONE_NEWPID
	}
	if iso.Network {
		f |= unix.CLONE_NEWNET
	}
	if iso.IPC {
		f |= unix.CLONE_NEWIPC
	}
	if iso.UTS {
		f |= unix.CLONE_NEWUTS
	}
	if iso.Mount {
		f |= unix.CLONE_NEWNS
	}
	return f
}

// applyCloneAttrs puts the namespaces of iso on a supervisor's SysProcAttr:
// in a user namespace the supervisor is uid 0, mapped to iso.UID on the host.
func applyCloneAttrs(a *syscall.SysProcAttr, iso Isolation) {
	a.Cloneflags = cloneFlags(iso)
	if iso.User {
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: iso.UID, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: iso.GID, Size: 1}}
		a.GidMappingsEnableSetgroups = false
		// Become the namespace's uid 0 (iso.UID on the host): the
		// capabilities in the namespace survive the exec only for uid 0.
		a.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
	}
}

// enterIsolation runs in the supervisor, inside its new namespaces: it gives
// the run its hostname, brings up the isolated loopback and assembles the
// minimal root.
func enterIsolation(spec Spec) error {
	iso := spec.Isolation
	if iso.UTS {
		if err := unix.Sethostname([]byte("codeexec")); err != nil {
			return fmt.Errorf("setting the hostname: %w", err)
		}
	}
	if iso.Network {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("bringing up the isolated loopback: %w", err)
		}
	}
	if iso.Mount {
		if err := buildRoot(spec); err != nil {
			return fmt.Errorf("building the minimal root: %w", err)
		}
	}
	return nil
}

// loopbackUp sets the flag IFF_UP on lo, the only interface of a new
// network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// buildRoot assembles the run's root in iso.RootDir and pivots into it:
// the system directories read-only, the run directory writable at its own
// path, private /tmp and /dev/shm, a minimal /dev and a /proc of the run's
// PID namespace. Nothing else of the host is there.
func buildRoot(spec Spec) error {
	iso := spec.Isolation
	root := iso.RootDir
	// Nothing done here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"); err != nil {
		return fmt.Errorf("mounting the root tmpfs: %w", err)
	}
	for _, p := range iso.ReadOnly {
		if err := bindReadOnly(p, filepath.Join(root, p)); err != nil {
			return err
		}
	}
	tmpSize := max(iso.TmpBytes, 1<<20)
	tmpOpts := "size=" + strconv.FormatInt(tmpSize, 10) + ",mode=1777"
	if err := mountTmpfs(filepath.Join(root, "tmp"), tmpOpts); err != nil {
		return err
	}
	// The run directory keeps its path, so that HOME, TMPDIR and the
	// program file name are the same inside and out.
	work := filepath.Join(root, spec.Dir)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(spec.Dir, work, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the run directory: %w", err)
	}
	if err := unix.Mount("", work, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remounting the run directory nosuid: %w", err)
	}
	if err := buildDev(filepath.Join(root, "dev"), tmpOpts); err != nil {
		return err
	}
	proc := filepath.Join(root, "proc")
	if err := os.Mkdir(proc, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	// pivot_root(".", ".") stacks the old root under the new one; detaching
	// it leaves only the new root.
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	// The root itself becomes read-only: only /tmp, /dev/shm and the run
	// directory can be written.
	return unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}

func mountTmpfs(dir, opts string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting a tmpfs at %s: %w", dir, err)
	}
	return nil
}

// bindReadOnly makes host path src visible read-only at dst; a symbolic link
// is copied as a link (merged-/usr systems link /bin to usr/bin).
func bindReadOnly(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		err = os.Mkdir(dst, 0o755)
	default:
		var f *os.File
		f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s: %w", src, err)
	}
	// A read-only remount must keep the flags the kernel locked on the
	// original mount (nodev, noexec, ...), or it is refused.
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID)
	var st unix.Statfs_t
	if unix.Statfs(dst, &st) == nil {
		for _, f := range []struct{ st, ms int64 }{
			{unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
			{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME},
			{unix.ST_RELATIME, unix.MS_RELATIME},
		} {
			if st.Flags&f.st != 0 {
				flags |= uintptr(f.ms)
			}
		}
	}
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", src, err)
	}
	return nil
}

// buildDev makes a /dev with only the harmless character devices, bound from
// the host, and a private /dev/shm.
func buildDev(dev, shmOpts string) error {
	if err := mountTmpfs(dev, "size=64k,mode=0755"); err != nil {
		return err
	}
	for _, name := range []string{"null", "zero", "full", "random", "urandom"} {
		dst := filepath.Join(dev, name)
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+name, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s: %w", name, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	if err := mountTmpfs(filepath.Join(dev, "shm"), shmOpts); err != nil {
		return err
	}
	return unix.Mount("", dev, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// lockDown runs in the exec stage just before the interpreter starts: it
// drops every capability the stage holds in its user namespace, and applies
// Landlock.
func lockDown(spec Spec) error {
	iso := spec.Isolation
	if iso.User {
		if err := dropCapabilities(); err != nil {
			return fmt.Errorf("dropping capabilities: %w", err)
		}
	}
	if iso.Landlock {
		if err := applyLandlock(spec); err != nil {
			return fmt.Errorf("applying Landlock: %w", err)
		}
	}
	return nil
}

// dropCapabilities empties the bounding, ambient, inheritable, permitted and
// effective sets of this thread (the one that execs), so that the program
// has no capability even as uid 0 of its user namespace.
func dropCapabilities() error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return unix.Capset(&hdr, &data[0])
}

// applyLandlock limits file access: read and execute in the read-only
// system paths, read and write in the run directory (and in the private
// /tmp and /dev/shm when there is a mount namespace), the harmless devices.
func applyLandlock(spec Spec) error {
	iso := spec.Isolation
	rw := []string{spec.Dir}
	ro := iso.ReadOnly
	if iso.Mount {
		rw = append(rw, "/tmp", "/dev/shm")
		// The minimal root holds nothing but what is listed here anyway.
		ro = []string{"/"}
	}
	rules := []landlock.Rule{
		landlock.RODirs(ro...).IgnoreIfMissing(),
		landlock.RODirs("/proc").IgnoreIfMissing(),
		landlock.RWDirs(rw...).IgnoreIfMissing(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full").IgnoreIfMissing(),
		landlock.ROFiles("/dev/random", "/dev/urandom").IgnoreIfMissing(),
	}
	return landlock.V5.BestEffort().RestrictPaths(rules...)
}

// landlockABI returns the Landlock ABI version of this kernel (0: none).
func landlockABI() (int, error) {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0, err
	}
	return v, nil
}

// probeIsolation finds which isolation features work on this host, by
// trying them: each feature that fails (alone or with the others) is turned
// off with the reason, and the others stay on. disabled are turned off by
// the operator.
func (r *Runner) probeIsolation(ctx context.Context, disabled []Feature) (Isolation, []sandbox.Protection) {
	iso := Isolation{UID: os.Getuid(), GID: os.Getgid(), ReadOnly: readOnlyPaths(r.interp)}
	if os.Geteuid() != 0 {
		// Dumpability is process-wide and the last Runner made decides it
		// (see hardenServer). codeexec makes one; a process that makes
		// several (tests, benchmarks) must not keep an earlier one's
		// non-dumpable state, under which no user namespace can be mapped.
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	}
	if os.Geteuid() == 0 {
		iso.UID, iso.GID = SandboxUID, SandboxUID
	}
	reason := map[Feature]string{}
	for _, f := range Features {
		if slices.Contains(disabled, f) {
			reason[f] = "turned off by CODE_EXEC_PROCESS_DISABLE"
			continue
		}
		iso.set(f, true)
	}
	if iso.Landlock {
		if v, err := landlockABI(); err != nil || v < 1 {
			iso.Landlock = false
			reason[FeatureLandlock] = fmt.Sprintf("the kernel does not offer Landlock (%v)", err)
		}
	}
	if !iso.User && os.Geteuid() != 0 {
		// Without root, every other namespace needs the user namespace.
		for _, f := range []Feature{FeaturePID, FeatureNetwork, FeatureIPC, FeatureUTS, FeatureMount} {
			if iso.Has(f) {
				iso.set(f, false)
				reason[f] = "needs a user namespace, which is turned off, when the server is not root"
			}
		}
	}
	dependOnMount := func() {
		// Without its own /proc (which needs the mount namespace) a PID
		// namespace would still show the host's processes, and Landlock's
		// helper would look for /proc/<pid> under the wrong numbers.
		if iso.PID && !iso.Mount {
			iso.PID = false
			reason[FeaturePID] = "needs the mount namespace (for a /proc of its own), which is " + strings.TrimPrefix(reason[FeatureMount], "unavailable on this host: ")
		}
	}
	dependOnMount()
	if err := r.tryIsolation(ctx, iso); err != nil {
		// The user namespace first, alone: the other features are then
		// tried with it as runs will have it, so that a host without user
		// namespaces does not take Landlock down with them.
		if iso.User {
			one := Isolation{User: true, UID: iso.UID, GID: iso.GID, ReadOnly: iso.ReadOnly}
			if err := r.tryIsolation(ctx, one); err != nil {
				iso.User = false
				reason[FeatureUser] = "unavailable on this host: " + explainNamespaceError(err)
				if os.Geteuid() != 0 {
					for _, f := range []Feature{FeaturePID, FeatureNetwork, FeatureIPC, FeatureUTS, FeatureMount} {
						if iso.Has(f) {
							iso.set(f, false)
							reason[f] = "needs a user namespace, which is unavailable, when the server is not root"
						}
					}
				}
			}
		}
		// Then each other feature on its own.
		for _, f := range Features {
			if !iso.Has(f) || f == FeatureUser {
				continue
			}
			one := iso
			for _, g := range Features {
				if g != FeatureUser {
					one.set(g, g == f)
				}
			}
			if err := r.tryIsolation(ctx, one); err != nil {
				iso.set(f, false)
				reason[f] = "unavailable on this host: " + explainNamespaceError(err)
			}
		}
		// Features that work alone but not together: drop the mount
		// namespace, then everything, rather than fail every run.
		if err := r.tryIsolation(ctx, iso); err != nil && iso.Mount {
			iso.Mount = false
			reason[FeatureMount] = "fails together with the other features: " + err.Error()
		}
		if err := r.tryIsolation(ctx, iso); err != nil {
			for _, f := range Features {
				if iso.Has(f) {
					iso.set(f, false)
					reason[f] = "the features fail together: " + err.Error()
				}
			}
		}
	}
	dependOnMount()
	r.shield = r.hardenServer(&iso, reason)
	// The final check: the chosen features, with the server as runs will
	// find it (hardened or not), through the same start-up path as a run.
	if iso.namespaces() || iso.Landlock {
		if err := r.tryIsolation(ctx, iso); err != nil {
			for _, f := range Features {
				if iso.Has(f) {
					iso.set(f, false)
					reason[f] = "fails once the server is set up for runs: " + err.Error()
				}
			}
			r.shield = r.hardenServer(&iso, reason)
		}
	}
	var ps []sandbox.Protection
	for _, f := range Features {
		p := sandbox.Protection{Name: protectionName(f), Active: iso.Has(f), Detail: featureDetail[f]}
		if !p.Active {
			p.Detail = reason[f]
			if f == FeatureUser && os.Geteuid() == 0 && p.Detail == "" {
				p.Detail = "not needed"
			}
		}
		ps = append(ps, p)
	}
	return iso, ps
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
func (r *Runner) hardenServer(iso *Isolation, reason map[Feature]string) sandbox.Protection {
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
			if iso.Has(f) {
				iso.set(f, false)
				reason[f] = "turned off: without the PID namespace or Landlock, runs could reach the server unless it is non-dumpable, and a non-dumpable server cannot map a user namespace as an ordinary user"
			}
		}
	}
	if err := HardenServer(); err != nil {
		p.Active = false
		p.Detail = "the server could not be made non-dumpable (" + err.Error() + "): code running as the server's user may read its environment"
		return p
	}
	p.Detail = "the server is non-dumpable: code running as its user can neither read its environment nor trace it"
	return p
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
func (r *Runner) tryIsolation(ctx context.Context, iso Isolation) error {
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
	dir, err := os.MkdirTemp(r.root, "probe-")
	if err != nil {
		return err
	}
	defer RemoveAll(dir)
	if iso.User {
		_ = os.Chown(dir, iso.UID, iso.GID)
	} else if r.cred != nil {
		_ = os.Chown(dir, int(r.cred.UID), int(r.cred.GID))
	}
	if iso.Mount {
		root, err := os.MkdirTemp(r.root, "probe-root-")
		if err != nil {
			return err
		}
		defer RemoveAll(root)
		if iso.User {
			_ = os.Chown(root, iso.UID, iso.GID)
		}
		iso.RootDir = root
	}
	var cred *Credential
	if !iso.User {
		cred = r.cred
	}
	res := &sandbox.Result{}
	lim := sandbox.Limits{Timeout: 10 * time.Second, OutputBytes: 4096, MemoryBytes: 64 << 20, Processes: 16, OpenFiles: 64, FileSizeBytes: 1 << 20}
	err = Spawn(ctx, Spec{Path: truePath, Env: MinimalEnv(dir), Dir: dir, Limits: lim, Rlimits: true, Credential: cred, NoNewPrivs: true, Isolation: iso}, res)
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
