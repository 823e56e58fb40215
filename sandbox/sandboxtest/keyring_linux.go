//go:build linux

package sandboxtest

import (
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// sessionKeyringVar marks a test binary that already runs in a session
// keyring of its own.
const sessionKeyringVar = "CODE_EXEC_TEST_SESSION_KEYRING"

// InSessionKeyring re-executes the test binary in a new session keyring, as a
// server started by `keyctl session -` or under a login's pam_keyinit runs,
// so that the containment suite can put a key there and see whether a run
// reaches it. A session keyring belongs to a thread's credentials, so it is
// joined on a locked thread that then executes the binary again: every thread
// of the new image shares it. It returns, doing nothing, when the binary
// already runs in one or when the host refuses keyrings (a seccomp policy);
// it never returns otherwise. Call it from TestMain, after
// process.MaybeRunHelper.
func InSessionKeyring() {
	if os.Getenv(sessionKeyringVar) != "" {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, err := unix.KeyctlJoinSessionKeyring("codeexec-test-" + strconv.Itoa(os.Getpid())); err != nil {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(exe, os.Args, append(os.Environ(), sessionKeyringVar+"=1"))
}

// SessionKeyringAvailable reports whether this process runs in a session
// keyring of its own (see InSessionKeyring).
func SessionKeyringAvailable() bool { return os.Getenv(sessionKeyringVar) != "" }

// PlantKey adds a user key called desc holding payload to this process's
// session keyring and returns a function that removes it.
func PlantKey(desc, payload string) (remove func(), err error) {
	id, err := unix.AddKey("user", desc, []byte(payload), unix.KEY_SPEC_SESSION_KEYRING)
	if err != nil {
		return nil, err
	}
	return func() { _, _ = unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0) }, nil
}

// KeyPlanted reports whether a user key called desc is in this process's
// session keyring, and removes it if so.
func KeyPlanted(desc string) bool {
	id, err := unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "user", desc, 0)
	if err != nil {
		return false
	}
	_, _ = unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0)
	return true
}

// ODirectory is the open flag O_DIRECTORY, for InheritableFiles.
const ODirectory = syscall.O_DIRECTORY

// InheritableFiles opens paths without close-on-exec, as descriptors that a
// server inherited from whatever started it; flags[i] are the open flags of
// paths[i]. The returned function closes them.
func InheritableFiles(paths []string, flags []int) (closeAll func(), err error) {
	var fds []int
	closeAll = func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	}
	for i, p := range paths {
		fd, err := syscall.Open(p, flags[i], 0)
		if err != nil {
			closeAll()
			return nil, err
		}
		fds = append(fds, fd)
	}
	return closeAll, nil
}
