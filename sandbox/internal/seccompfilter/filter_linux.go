//go:build linux

package seccompfilter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// refusedSyscalls fail with EPERM.
var refusedSyscalls = []string{
	// New namespaces and entering others: a nested user namespace gives
	// back every capability (raw sockets, netfilter, mounts inside it).
	"setns",
	// Kernel keyrings are not namespaced.
	"keyctl", "add_key", "request_key",
	// Large kernel interfaces, rarely needed and often exploited.
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// The kernel itself.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "quotactl_fd",
	"lookup_dcookie", "uselib", "vhangup", "iopl", "ioperm",
	// Mounts, old and new API.
	"mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
	"move_mount", "open_tree", "mount_setattr",
	// Other processes' memory and files: a program has no debugger to run.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"open_by_handle_at",
	// The clock.
	"settimeofday", "clock_settime", "clock_adjtime",
}

// allowedPersonalities are the personality(2) arguments a program may pass,
// as in Docker's default profile: Linux, PER_LINUX32, UNAME26, both, and
// 0xffffffff, which only asks for the current one. Any other (flags such as
// ADDR_NO_RANDOMIZE, which turns off address randomization for what the
// program runs next, or READ_IMPLIES_EXEC) fails with EPERM.
var allowedPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// namespaceFlags are the clone and unshare flags that create namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// seccompPolicy is the filter of a run on this architecture.
//
// clone3 takes its flags in memory, where a filter cannot look, so it fails
// with ENOSYS: the C library then falls back to clone, whose flags are
// checked. clone and unshare fail with EPERM when they ask for a namespace,
// and personality when its argument is none of allowedPersonalities.
func seccompPolicy() (*seccomp.Policy, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		// clone's flags are its first argument on these; other
		// architectures are not checked.
		return nil, fmt.Errorf("no filter for %s (only amd64 and arm64)", runtime.GOARCH)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range refusedSyscalls {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	nsCond := func(name string, flags uint64) seccomp.NameWithConditions {
		return seccomp.NameWithConditions{Name: name, Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: flags},
		}}
	}
	var otherPersonality seccomp.ArgumentConditions
	for _, v := range allowedPersonalities {
		otherPersonality = append(otherPersonality, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: v})
	}
	return &seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: names, Action: seccomp.ActionErrno},
			{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)},
			{NamesWithCondtions: []seccomp.NameWithConditions{
				nsCond("clone", namespaceFlags),
				nsCond("unshare", namespaceFlags|unix.CLONE_NEWTIME),
				{Name: "personality", Conditions: otherPersonality},
			}, Action: seccomp.ActionErrno},
		},
	}, nil
}

// Program returns the filter of a run on this host, assembled once: the
// kernel's sock_filter instructions, 8 bytes each in this machine's byte
// order (executor.Isolation.SeccompFilter).
var Program = sync.OnceValues(func() ([]byte, error) {
	p, err := seccompPolicy()
	if err != nil {
		return nil, err
	}
	insts, err := p.Assemble()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		b = binary.NativeEndian.AppendUint16(b, in.Op)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b, nil
})

// Available reports why the filter cannot be used here, or nil.
func Available() error {
	if !seccomp.Supported() {
		return errors.New("the kernel does not offer seccomp filters")
	}
	_, err := Program()
	return err
}
