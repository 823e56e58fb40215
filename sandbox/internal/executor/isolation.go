package executor

// Isolation is the kernel isolation of one run (Linux only): which
// namespaces the supervisor is started in, whether Landlock applies, and
// what the minimal root contains. The zero value isolates nothing.
type Isolation struct {
	// User, PID, Network, IPC, UTS and Mount ask for a namespace of that
	// kind; Landlock restricts file access with Landlock.
	User, PID, Network, IPC, UTS, Mount, Landlock bool
	// UID and GID are the host ids mapped to 0 inside a user namespace.
	UID, GID int
	// RootDir is an empty directory where the minimal root is assembled
	// (in the run's private mount namespace only).
	RootDir string
	// ReadOnly are host paths visible read-only (system directories and
	// the interpreters' own directories).
	ReadOnly []string
	// TmpBytes sizes the private /tmp.
	TmpBytes int64
}

// Namespaces reports whether a namespace is asked for.
func (i Isolation) Namespaces() bool {
	return i.User || i.PID || i.Network || i.IPC || i.UTS || i.Mount
}
