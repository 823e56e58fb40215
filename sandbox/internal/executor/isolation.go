package executor

// Isolation is the kernel isolation of one run (Linux only): which
// namespaces the supervisor is started in, whether Landlock applies, and
// what the minimal root contains. The zero value isolates nothing.
type Isolation struct {
	// User, PID, Network, IPC, UTS and Mount ask for a namespace of that
	// kind; Landlock restricts file access with Landlock.
	User, PID, Network, IPC, UTS, Mount, Landlock bool
	// Seccomp applies the run's seccomp filter, SeccompFilter: its
	// sock_filter instructions as sandbox/internal/seccompfilter.Program
	// assembles them (the run helpers do not link the assembler). A run
	// that asks for the filter without one fails.
	Seccomp       bool
	SeccompFilter []byte `json:",omitempty"`
	// UID and GID are the run's host ids: in a user namespace, the
	// supervisor's uid 0 maps to them, and the program's ProgramUID (of a
	// user namespace nested in the supervisor's) to the supervisor's 0.
	UID, GID int
	// RootDir is an empty directory where the minimal root is assembled
	// (in the run's private mount namespace only).
	RootDir string
	// ReadOnly are host paths visible read-only (system directories and
	// the interpreters' own directories).
	ReadOnly []string
	// TmpBytes sizes the private /tmp.
	TmpBytes int64
	// BindWork binds the host's run directory into the minimal root
	// instead of giving the run a capped tmpfs copy of it: what the program
	// writes there outlives it (sessions, whose programs share one
	// directory). The directory is then not capped in bytes and files by
	// the tmpfs, only per file by RLIMIT_FSIZE.
	BindWork bool
	// Binds are host folders that the run sees: at Dst in the minimal root
	// with a mount namespace, where they are without one. Landlock lets the
	// run read them, and write them when Writable.
	Binds []Bind
}

// Bind is a host folder that a run sees.
type Bind struct {
	// Src is the folder on the host; Dst where the run sees it with a
	// mount namespace (absolute).
	Src, Dst string
	// Writable lets the run change it. A read-only bind is read-only all
	// the way down: mounts below Src are not carried over.
	Writable bool
}

// Path is where a run with iso sees b.
func (iso Isolation) Path(b Bind) string {
	if iso.Mount {
		return b.Dst
	}
	return b.Src
}

// Namespaces reports whether a namespace is asked for.
func (i Isolation) Namespaces() bool {
	return i.User || i.PID || i.Network || i.IPC || i.UTS || i.Mount
}

// ProgramUID (and group) is who the program is inside its user namespace:
// an ordinary user, as in docker mode, never uid 0. The supervisor is uid 0
// of the run's user namespace (mapped to the run's host user); the exec
// stage starts in a user namespace nested in it, which maps only ProgramUID,
// to the supervisor's uid 0. So the program and the supervisor are the same
// host user, yet the program has no uid 0 to become (setuid(0) fails), no
// capability, and no claim on the supervisor, whose user namespace is not
// its own. An ordinary user's server can do this too: a single mapping of
// one's own uid needs no privilege. It is docker mode's uid (the sandbox
// image's user), which hosts seldom give an account, unlike 1000.
const ProgramUID = 10001

// RunUserName is the name of the program's user (and group) in a run whose
// minimal root shows the host's /etc: the run's own /etc/passwd and
// /etc/group name it so, as docker mode's image does, and name no host
// account.
const RunUserName = "sandbox"

// TmpfsInodes caps the files (inodes) of each tmpfs a run writes to: its
// work directory, /tmp and /dev/shm. Docker mode's /tmp has the same cap.
const TmpfsInodes = 16384
