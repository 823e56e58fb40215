//go:build linux

package executor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// This file applies an Isolation on Linux: the supervisor is cloned into
// its namespaces (applyCloneAttrs), sets them up from inside (enterIsolation),
// and the exec stage drops capabilities and applies Landlock (lockDown).

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
// the run its hostname, brings up the isolated loopback, bounds shared memory
// in its IPC namespace and assembles the minimal root, with a copy of the
// host's run directory src in the run's own (nil: it stays empty).
func enterIsolation(spec Spec, src *os.Root) error {
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
	if iso.IPC {
		if err := setIPCLimits(spec.Limits.MemoryBytes); err != nil {
			return fmt.Errorf("bounding shared memory: %w", err)
		}
	}
	if iso.Mount {
		if err := buildRoot(spec, src); err != nil {
			return fmt.Errorf("building the minimal root: %w", err)
		}
	}
	return nil
}

// mountOwnProc mounts a /proc of the supervisor's PID namespace over the
// host's, in its own mount namespace (made private first, so that nothing
// propagates back to the host).
func mountOwnProc() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting the run's /proc: %w", err)
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
// path (holding a copy of src, unless nil), private /tmp and /dev/shm, a
// minimal /dev and a /proc of the run's PID namespace. Nothing else of the
// host is there.
func buildRoot(spec Spec, src *os.Root) error {
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
	if err := bindUserDatabase(root, spec); err != nil {
		return err
	}
	tmpSize := max(iso.TmpBytes, 1<<20)
	sized := "size=" + strconv.FormatInt(tmpSize, 10) + ",nr_inodes=" + strconv.Itoa(TmpfsInodes)
	tmpOpts := sized + ",mode=1777"
	if err := mountTmpfs(filepath.Join(root, "tmp"), tmpOpts); err != nil {
		return err
	}
	// The run directory keeps its path, so that HOME, TMPDIR and the
	// program file name are the same inside and out. It is a tmpfs of its
	// own, capped in bytes and files like /tmp, holding a copy of what the
	// server put in the host's run directory: a run cannot fill the host's
	// disk.
	work := filepath.Join(root, spec.Dir)
	if iso.BindWork {
		if err := bindWork(spec.Dir, work); err != nil {
			return err
		}
	} else {
		if err := mountTmpfs(work, sized+",mode=0755"); err != nil {
			return err
		}
		if src != nil {
			if err := copyTree(src, work); err != nil {
				return err
			}
		}
	}
	for _, b := range iso.Binds {
		if err := bindDir(b.Src, filepath.Join(root, b.Dst), b.Writable); err != nil {
			return err
		}
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
	// The run's own kernel settings (shared-memory limits, ...) are
	// read-only to it, as in a container.
	sys := filepath.Join(proc, "sys")
	if err := unix.Mount(sys, sys, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding /proc/sys: %w", err)
	}
	if err := unix.Mount("", sys, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("making /proc/sys read-only: %w", err)
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

// openRunDir opens the host's run directory of spec, to copy it into the
// run's own (see buildRoot): nil when the run binds it instead, or has no
// mount namespace. The directory stays reachable through it once the
// host's root is out of sight.
func openRunDir(spec Spec) (*os.Root, error) {
	if !spec.Isolation.Mount || spec.Isolation.BindWork {
		return nil, nil
	}
	src, err := os.OpenRoot(spec.Dir)
	if err != nil {
		return nil, fmt.Errorf("opening the run directory: %w", err)
	}
	return src, nil
}

// copyTree copies the directories and regular files under src into dst
// (an empty tmpfs); anything else (links, devices) is left out.
func copyTree(src *os.Root, dst string) error {
	err := fs.WalkDir(src.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		to := filepath.Join(dst, filepath.FromSlash(p))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(to, info.Mode().Perm()|0o700)
		case d.Type().IsRegular():
			return copyFile(src, p, to, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("copying the run directory: %w", err)
	}
	return nil
}

func copyFile(root *os.Root, src, dst string, perm os.FileMode) error {
	in, err := root.Open(filepath.FromSlash(src))
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
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

// bindUserDatabase puts the run's own /etc/passwd and /etc/group over the
// host's in the minimal root, when it shows the host's /etc: the program's
// user is RunUserName there (whoami, id -un, ls -l and python's getpass say
// so), its group too, and no host account's name is seen (uid 1000, say, is
// often a person's). They list root and nobody as well: the ids that files
// of the host show as (the overflow id for every id the run's user
// namespace does not map). Each file is written in the root's tmpfs, bound
// read-only, and unlinked: the bind keeps it.
func bindUserDatabase(root string, spec Spec) error {
	uid, ok := programUser(spec)
	if !ok {
		return nil
	}
	id := strconv.Itoa(uid)
	files := []struct{ name, content string }{
		{"passwd", "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			RunUserName + ":x:" + id + ":" + id + ":codeexec run:" + spec.Dir + ":/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{"group", "root:x:0:\n" + RunUserName + ":x:" + id + ":\nnogroup:x:65534:\n"},
	}
	for _, f := range files {
		dst := filepath.Join(root, "etc", f.name)
		if fi, err := os.Lstat(dst); err != nil || !fi.Mode().IsRegular() {
			continue // none on the host, or a link: nothing to hide
		}
		src := filepath.Join(root, ".codeexec-"+f.name)
		if err := os.WriteFile(src, []byte(f.content), 0o644); err != nil {
			return fmt.Errorf("writing the run's /etc/%s: %w", f.name, err)
		}
		err := unix.Mount(src, dst, "", unix.MS_BIND, "")
		if err == nil {
			err = unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		}
		if rerr := os.Remove(src); err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("binding the run's /etc/%s: %w", f.name, err)
		}
	}
	return nil
}

// programUser is the uid the program has in its mount namespace: ProgramUID
// in a user namespace of its own, its host user without one; false when it
// runs as the server's own user (no user of its own to name).
func programUser(spec Spec) (int, bool) {
	switch {
	case spec.Isolation.User:
		return ProgramUID, true
	case spec.Credential != nil:
		return int(spec.Credential.UID), true
	}
	return 0, false
}

// bindDir makes the host folder src visible at dst, nosuid and nodev, and
// read-only unless writable. A read-only bind is not recursive: a mount
// below src stays out of sight rather than writable under a read-only top.
func bindDir(src, dst string, writable bool) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND)
	if writable {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, dst, "", flags, ""); err != nil {
		return fmt.Errorf("binding %s: %w", src, err)
	}
	remount := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	if !writable {
		remount |= unix.MS_RDONLY
	}
	if err := unix.Mount("", dst, "", remount|lockedFlags(dst), ""); err != nil {
		return fmt.Errorf("remounting %s: %w", src, err)
	}
	return nil
}

// lockedFlags are the flags of the mount at dst that a remount must keep
// (the kernel locks them on mounts from another user namespace).
func lockedFlags(dst string) uintptr {
	var flags uintptr
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
	return flags
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
	flags := uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID) | lockedFlags(dst)
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
// has no capability. In a run with a user namespace the exec stage is
// ProgramUID of a namespace of its own and holds only CAP_SETPCAP there (see
// programUserNamespace), which is what emptying the bounding set takes.
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
	for _, b := range iso.Binds {
		switch {
		case b.Writable:
			rw = append(rw, iso.Path(b))
		case !iso.Mount:
			ro = append(ro, b.Src)
		}
	}
	return restrictThread([]llRule{
		{llAccessRead, ro},
		{llAccessRead, []string{"/proc"}},
		{llAccessRead | llAccessWrite, rw},
		{(llAccessRead | llAccessWrite) & llAccessFile, []string{"/dev/null", "/dev/zero", "/dev/full"}},
		{llAccessRead & llAccessFile, []string{"/dev/random", "/dev/urandom"}},
	})
}

// bindWork binds the host's run directory dir at work, writable, nosuid and
// nodev (Isolation.BindWork).
func bindWork(dir, work string) error {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dir, work, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the run directory: %w", err)
	}
	if err := unix.Mount("", work, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remounting the run directory nosuid: %w", err)
	}
	return nil
}
