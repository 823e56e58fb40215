// Command nouserns runs a command as an ordinary user on a host where that
// user cannot create user namespaces, as on a host with
// user.max_user_namespaces=0, without changing the host.
//
//	nouserns USER COMMAND [ARG...]
//
// The limit is per user namespace and binds every namespace below, so the
// command runs in a new user namespace that maps host uids and gids 0-65535
// onto themselves (files keep their owners), whose limit is set to 0 by its
// root before it becomes USER. Run it as root: CI's machines deny root
// CAP_SYS_RESOURCE in the initial namespace, so the host-wide sysctl cannot be
// set there, but root of the new namespace may set that namespace's own.
//
// It lives under .ci (a directory go's ./... patterns skip) because only CI
// uses it: go run ./.ci/nouserns USER COMMAND...
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

const stage2 = "__nouserns-stage2"

func main() {
	if len(os.Args) > 1 && os.Args[1] == stage2 {
		os.Exit(inside(os.Args[2], os.Args[3:]))
	}
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: nouserns USER COMMAND [ARG...]")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "nouserns: run me as root")
		os.Exit(2)
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	cmd := exec.Command(self, append([]string{stage2}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: ids,
		GidMappings: ids,
		// The user's groups are set inside, as root of the namespace.
		GidMappingsEnableSetgroups: true,
	}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		fail(err)
	}
}

// inside runs as root of the new user namespace: it forbids further user
// namespaces, becomes the user and execs the command.
func inside(name string, argv []string) int {
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0\n"), 0); err != nil {
		fail(fmt.Errorf("setting user.max_user_namespaces=0 in the new namespace: %w", err))
	}
	u, err := user.Lookup(name)
	if err != nil {
		fail(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fail(err)
	}
	// Go applies these to every thread of the process.
	if err := syscall.Setgroups([]int{gid}); err != nil {
		fail(err)
	}
	if err := syscall.Setgid(gid); err != nil {
		fail(err)
	}
	if err := syscall.Setuid(uid); err != nil {
		fail(err)
	}
	fail(syscall.Exec(path, argv, os.Environ()))
	return 1
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "nouserns:", err)
	os.Exit(1)
}
