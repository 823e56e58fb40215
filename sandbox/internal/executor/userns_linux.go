//go:build linux

package executor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// programUserNamespace puts the exec stage in a user namespace of its own
// where the program is ProgramUID.
func programUserNamespace(sys *syscall.SysProcAttr) {
	sys.Cloneflags |= unix.CLONE_NEWUSER
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: ProgramUID, HostID: 0, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: ProgramUID, HostID: 0, Size: 1}}
	sys.GidMappingsEnableSetgroups = false
	// An exec as a user other than 0 keeps no capability; CAP_SETPCAP,
	// kept as an ambient capability of the new namespace, lets the exec
	// stage empty its bounding set before it drops every capability.
	sys.AmbientCaps = []uintptr{unix.CAP_SETPCAP}
}

// cgroupFD is the first descriptor of the run's cgroup.procs files, passed
// from the server to the supervisor (cgroupFD, cgroupFD+1, ...).
const cgroupFD = 7

// joinCgroups moves the exec stage, pid, into the run's n cgroups. The
// supervisor does it while the exec stage starts up (it waits for its Spec
// until then), so that the move, which on cgroup v1 waits for an RCU grace
// period, costs the run no time of its own; the program and all it starts
// are counted there, and the supervisor is not. The files were opened by the
// server; the kernel checks that the supervisor and the exec stage are the
// same host user, which they are.
func joinCgroups(pid, n int) error {
	p := strconv.Itoa(pid)
	for i := range n {
		f := os.NewFile(uintptr(cgroupFD+i), "cgroup.procs")
		if _, err := f.WriteString(p); err != nil {
			return err
		}
	}
	return nil
}

// nsLimits are kernel settings of the run's user namespace that the
// supervisor sets once the exec stage runs: no namespace may be created in
// the run any more (the exec stage's own user namespace is the last), and
// per-user kernel limits are bounded per run. The files are opened while the
// supervisor can still reach them (before pivot_root); they belong to the
// supervisor's user namespace, which is the run's.
type nsLimits struct {
	files  []*os.File
	values []string
}

// runNamespaceLimits are the user-namespace settings of a run.
var runNamespaceLimits = []struct{ name, value string }{
	{"max_user_namespaces", "0"}, {"max_mnt_namespaces", "0"}, {"max_pid_namespaces", "0"},
	{"max_net_namespaces", "0"}, {"max_ipc_namespaces", "0"}, {"max_uts_namespaces", "0"},
	{"max_cgroup_namespaces", "0"}, {"max_time_namespaces", "0"},
	// Each run may hold a quarter of a user's default inotify instances,
	// so that runs that share a host user cannot starve each other.
	{"max_inotify_instances", "32"}, {"max_inotify_watches", "8192"},
}

// openNamespaceLimits opens the settings to write; missing ones (older
// kernels) are skipped.
func openNamespaceLimits() (*nsLimits, error) {
	l := &nsLimits{}
	for _, s := range runNamespaceLimits {
		f, err := os.OpenFile("/proc/sys/user/"+s.name, os.O_WRONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			l.close()
			return nil, fmt.Errorf("opening user.%s: %w", s.name, err)
		}
		l.files = append(l.files, f)
		l.values = append(l.values, s.value)
	}
	return l, nil
}

// apply writes the settings and closes the files. A nil l does nothing.
func (l *nsLimits) apply() error {
	if l == nil {
		return nil
	}
	defer l.close()
	for i, f := range l.files {
		if _, err := f.WriteString(l.values[i]); err != nil {
			return fmt.Errorf("setting %s: %w", f.Name(), err)
		}
	}
	return nil
}

func (l *nsLimits) close() {
	for _, f := range l.files {
		f.Close()
	}
	l.files = nil
}

// setIPCLimits bounds System V shared memory in the run's IPC namespace to
// its memory limit: one segment at most that large, all of them together no
// larger, and few of them.
func setIPCLimits(memory int64) error {
	if memory <= 0 {
		return nil
	}
	page := int64(os.Getpagesize())
	for _, s := range []struct{ name, value string }{
		{"shmmax", strconv.FormatInt(memory, 10)},
		{"shmall", strconv.FormatInt(memory/page, 10)},
		{"shmmni", "64"},
	} {
		if err := os.WriteFile("/proc/sys/kernel/"+s.name, []byte(s.value), 0); err != nil {
			return fmt.Errorf("setting kernel.%s: %w", s.name, err)
		}
	}
	return nil
}
