// Package seatbelt writes the Seatbelt profile (SBPL, the language of
// macOS's sandbox-exec) under which process mode runs each program on
// macOS, and reads profiles back: Evaluate decides an operation as
// Seatbelt's rules do, so that what a profile refuses is checked by unit
// tests on any system, not only on a Mac.
//
// The profile follows the ones that Anthropic's sandbox-runtime and
// OpenAI's Codex CLI generate (themselves after Chrome's renderer policy):
// deny by default; the process operations a program needs (fork, exec of
// what it may read, signals and process information within its own
// sandbox); a short list of sysctls and one directory service (user
// lookups); reads of the system's folders, the interpreters' folders and
// the folders the run is given; writes only to the run's writable folders;
// no network, or only connections to one port on the loopback (codeexec's
// egress proxy). Unlike those tools' defaults it allows no read of the
// rest of the disk: the user's home, other users' files, /Volumes and the
// temporary folders of other programs are refused, as are the keychain's
// services, Unix sockets (ssh-agent, Docker) and name resolution.
//
// Nothing here touches the system: the package builds and tests
// everywhere.
package seatbelt

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Policy is what one run may reach. Paths are absolute and real (symbolic
// links resolved: Seatbelt matches the path a file is opened by after the
// kernel resolved it, so /tmp/x is /private/tmp/x to it).
type Policy struct {
	// ReadOnly are folders (or files) the program may read, list, map as
	// code and execute from, with everything below them: the interpreters'
	// installations, package folders, a read-only workspace.
	ReadOnly []string
	// ReadWrite are folders it may also create, change and delete files
	// in: the run directory, a read-write workspace.
	ReadWrite []string
	// ProxyPort, when not 0, is the one TCP port that the program may
	// connect to, on the loopback (127.0.0.1 or ::1): codeexec's egress
	// proxy. With 0 the program has no network at all.
	ProxyPort int
}

// SystemReadOnly are the folders every program may read: the system's
// programs, libraries, frameworks and configuration, and the usual places
// of interpreters installed for every user (python.org's frameworks,
// Homebrew, MacPorts, the command line developer tools). None is personal.
var SystemReadOnly = []string{
	"/bin",
	"/sbin",
	"/usr",
	"/System",
	"/Library/Apple",
	"/Library/Frameworks",
	"/Library/Developer/CommandLineTools",
	"/private/etc",
	"/private/var/db/timezone",
	"/private/var/db/dyld",
	"/opt/homebrew",
	"/opt/local",
}

// devices are the device files every program may read and write.
var devices = []string{"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/dtracehelper"}

// links are the symbolic links at the root that programs resolve
// (/etc, /tmp and /var point into /private).
var links = []string{"/etc", "/tmp", "/var"}

// sysctls are the kernel values a program may read (Codex's list):
// hardware and system descriptions that interpreters ask for at start.
var sysctls = []string{
	"hw.activecpu", "hw.busfrequency_compat", "hw.byteorder", "hw.cacheconfig", "hw.cachelinesize_compat",
	"hw.cpufamily", "hw.cpufrequency", "hw.cpufrequency_compat", "hw.cputype", "hw.l1dcachesize_compat",
	"hw.l1icachesize_compat", "hw.l2cachesize_compat", "hw.l3cachesize_compat", "hw.logicalcpu",
	"hw.logicalcpu_max", "hw.machine", "hw.model", "hw.memsize", "hw.ncpu", "hw.nperflevels", "hw.packages",
	"hw.pagesize", "hw.pagesize_compat", "hw.physicalcpu", "hw.physicalcpu_max", "hw.tbfrequency_compat",
	"hw.vectorunit", "kern.argmax", "kern.hostname", "kern.maxfilesperproc", "kern.maxproc",
	"kern.osproductversion", "kern.osrelease", "kern.ostype", "kern.osvariant_status", "kern.osversion",
	"kern.secure_kernel", "kern.usrstack64", "kern.version", "machdep.cpu.brand_string",
	"sysctl.proc_cputype", "vm.loadavg",
}

// sysctlPrefixes are families of kernel values a program may read.
var sysctlPrefixes = []string{"hw.optional.", "hw.perflevel", "kern.proc.pgrp.", "kern.proc.pid.", "machdep.cpu."}

// ErrBadPath says that a policy's path cannot be written into a profile.
var ErrBadPath = errors.New("seatbelt: a path must be absolute, clean and free of control characters")

// Profile writes the policy as a Seatbelt profile, for sandbox-exec -p.
// It fails with ErrBadPath when a path is relative, not clean, or holds a
// control character, and when the port is out of range.
func (p Policy) Profile() (string, error) {
	ro, err := checkPaths(p.ReadOnly)
	if err != nil {
		return "", err
	}
	rw, err := checkPaths(p.ReadWrite)
	if err != nil {
		return "", err
	}
	if p.ProxyPort < 0 || p.ProxyPort > 65535 {
		return "", fmt.Errorf("seatbelt: proxy port %d is out of range", p.ProxyPort)
	}
	readable := append(slices.Clone(SystemReadOnly), ro...)
	readable, _ = checkPaths(append(readable, rw...))

	var b strings.Builder
	line := func(s string) { b.WriteString(s); b.WriteByte('\n') }
	group := func(head string, filters []string) {
		line("(" + head)
		for _, f := range filters {
			line("  " + f)
		}
		line(")")
	}
	line("(version 1)")
	line("; codeexec: one run of process mode. Deny by default; the last rule that matches decides.")
	line("(deny default)")
	line("")
	line("; Processes: fork, exec of what the program may read, signals and")
	line("; process information within this sandbox only.")
	line("(allow process-fork)")
	group("allow process-exec", subpaths(readable))
	line("(allow signal (target same-sandbox))")
	line("(allow process-info* (target same-sandbox))")
	line("; libuv and node ask the host for its processors.")
	line("(allow mach-host*)")
	line("; python's multiprocessing needs POSIX semaphores.")
	line("(allow ipc-posix-sem)")
	line("")
	line("; Kernel values that interpreters read at start.")
	var sc []string
	for _, s := range sysctls {
		sc = append(sc, "(sysctl-name "+quote(s)+")")
	}
	for _, s := range sysctlPrefixes {
		sc = append(sc, "(sysctl-name-prefix "+quote(s)+")")
	}
	group("allow sysctl-read", sc)
	line("")
	line("; User and group lookups (getpwuid). No other service: not the")
	line("; keychain, not name resolution, not the window server.")
	line(`(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))`)
	line("")
	line("; Reads: the system, the interpreters, the run's folders.")
	group("allow file-read* file-map-executable", subpaths(readable))
	line("; The root folder itself (getcwd reads it), looking up (not listing)")
	line("; the folders above those, and the links at the root.")
	line(`(allow file-read* (literal "/"))`)
	group("allow file-read-metadata", literals(append(slices.DeleteFunc(ancestors(readable), func(d string) bool { return d == "/" }), links...)))
	line("; Device files and the program's own descriptors.")
	group("allow file-read* file-write-data file-ioctl", literals(devices))
	line(`(allow file-read-data file-write-data (subpath "/dev/fd"))`)
	line("")
	if len(rw) > 0 {
		line("; Writes: the run's writable folders only.")
		group("allow file-write*", subpaths(rw))
		line("")
	}
	if p.ProxyPort > 0 {
		line("; Network: codeexec's egress proxy on the loopback, nothing else.")
		line("(allow network-outbound (remote ip " + quote("localhost:"+strconv.Itoa(p.ProxyPort)) + "))")
	} else {
		line("; Network: none.")
	}
	return b.String(), nil
}

// checkPaths returns paths, sorted without duplicates, or ErrBadPath.
func checkPaths(paths []string) ([]string, error) {
	for _, p := range paths {
		if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("%w: %q", ErrBadPath, p)
		}
	}
	out := slices.Clone(paths)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ancestors are the folders above paths, "/" included, sorted.
func ancestors(paths []string) []string {
	var out []string
	for _, p := range paths {
		for d := path.Dir(p); ; d = path.Dir(d) {
			out = append(out, d)
			if d == "/" {
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func subpaths(paths []string) []string { return filters("subpath", paths) }
func literals(paths []string) []string { return filters("literal", paths) }

func filters(kind string, paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = "(" + kind + " " + quote(p) + ")"
	}
	return out
}

// quote writes s as an SBPL string: in double quotes, with backslashes
// and double quotes escaped.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
