package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
)

// LabelOwner names the server process that created a container:
// "<host identity>/<pid>/<start time>". The host identity is the hostname,
// the kernel's boot id (/proc/sys/kernel/random/boot_id) and the inode of
// the PID namespace, so that two servers in two containers on one engine
// (whose PIDs are both small numbers) never look like the same host, and a
// reboot never makes an old pid look alive. The start time is field 22 of
// /proc/<pid>/stat, in clock ticks since boot, so that a pid reused by
// another process does not look like the owner.
//
// A codeexec that starts, or reaps, removes at once every container whose
// owner is on its own host identity and no longer runs (SIGKILL, a crash):
// whatever the container's state or deadline. Containers of an owner on
// another host identity, or without the label, wait for their deadline.
const LabelOwner = "io.codeexec.owner"

// owner is the process that created a container.
type owner struct {
	host  string // host identity: hostname, boot id, PID namespace
	pid   int
	start uint64 // clock ticks since boot (field 22 of /proc/<pid>/stat)
}

// String is the value of LabelOwner.
func (o owner) String() string {
	return o.host + "/" + strconv.Itoa(o.pid) + "/" + strconv.FormatUint(o.start, 10)
}

// parseOwner reads a LabelOwner value; ok is false when it is malformed.
func parseOwner(s string) (o owner, ok bool) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 {
		return owner{}, false
	}
	start, err := strconv.ParseUint(s[i+1:], 10, 64)
	if err != nil {
		return owner{}, false
	}
	rest := s[:i]
	j := strings.LastIndexByte(rest, '/')
	if j <= 0 {
		return owner{}, false
	}
	pid, err := strconv.Atoi(rest[j+1:])
	if err != nil || pid <= 0 {
		return owner{}, false
	}
	return owner{host: rest[:j], pid: pid, start: start}, true
}

var (
	selfOwnerOnce sync.Once
	selfOwner     owner
	selfOwnerOK   bool
)

// currentOwner is this process as an owner; ok is false where /proc cannot
// tell (not Linux, /proc not mounted), and containers then get no owner label.
func currentOwner() (owner, bool) {
	selfOwnerOnce.Do(func() {
		host, err := hostIdentity()
		if err != nil {
			return
		}
		pid := os.Getpid()
		start, err := processStart(pid)
		if err != nil {
			return
		}
		selfOwner, selfOwnerOK = owner{host: host, pid: pid, start: start}, true
	})
	return selfOwner, selfOwnerOK
}

// hostIdentity is "<hostname>:<boot id>:<pid namespace inode>". It contains
// no "/" (a hostname cannot), so it is safe inside LabelOwner.
func hostIdentity() (string, error) {
	name, err := os.Hostname()
	if err != nil {
		return "", err
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	ns, err := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	if err != nil {
		return "", err
	}
	ns = strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
	id := name + ":" + strings.TrimSpace(string(boot)) + ":" + ns
	return strings.ReplaceAll(id, "/", "_"), nil
}

// errNoProcess says that a pid does not exist.
var errNoProcess = errors.New("no such process")

// processStart returns the start time of pid (field 22 of /proc/<pid>/stat),
// or errNoProcess when there is no such process.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, errNoProcess
	}
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses itself: the fields after the last ")" are plain.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, errNoProcess // exited, waiting to be reaped
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// owners judges the owners named by LabelOwner from this process's host
// identity.
type owners struct {
	host string // this host identity; "" when unknown (nothing is judged)
	// gone reports whether no process pid with that start time runs here;
	// it errs on the side of "alive" when it cannot tell.
	gone func(pid int, start uint64) bool
}

// localOwners judges owners on this host through /proc.
func localOwners() owners {
	self, ok := currentOwner()
	if !ok {
		return owners{}
	}
	return owners{host: self.host, gone: func(pid int, start uint64) bool {
		got, err := processStart(pid)
		if errors.Is(err, errNoProcess) {
			return true
		}
		return err == nil && got != start
	}}
}

// dead reports whether label names an owner on this host identity that no
// longer runs. An owner elsewhere, or a missing or malformed label, is
// never judged dead.
func (w owners) dead(label string) bool {
	if w.host == "" || w.gone == nil {
		return false
	}
	o, ok := parseOwner(label)
	if !ok || o.host != w.host {
		return false
	}
	return w.gone(o.pid, o.start)
}
