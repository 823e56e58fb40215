package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
)

// Ping asks the engine that cli talks to for a ping, negotiating the API
// version. Its error wraps sandbox.ErrSandboxUnavailable and says in one
// sentence what is true and what to do: that nothing answers at the
// engine's address, or, for a local socket, that there is none, that
// nothing listens on it, or that it exists but this user (named, with its
// uid) may not open it, with the choices. The server's start (New) and the
// tests' skip reasons use it, so that both say the same.
func Ping(ctx context.Context, cli *client.Client) error {
	_, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", sandbox.ErrSandboxUnavailable, unreachable(engineHost(cli), err))
}

// engineHost is the engine's address as the user named it: DOCKER_HOST, or
// the client's default.
func engineHost(cli *client.Client) string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return cli.DaemonHost()
}

// unreachable explains why the engine at host did not answer a ping that
// failed with err. The client does not wrap the system's error when a
// socket refuses the user (it says "permission denied while trying to
// connect" in a new error), so a local socket is dialled again here to
// learn what the system said.
func unreachable(host string, err error) string {
	const otherEngine = "or set DOCKER_HOST to an engine this user may use"
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return fmt.Sprintf("no Docker Engine answers at %s; start one, %s (%v)", host, otherEngine, err)
	}
	conn, derr := net.DialTimeout("unix", path, 5*time.Second)
	switch {
	case derr == nil:
		_ = conn.Close()
		return fmt.Sprintf("the Docker Engine's socket %s accepts a connection but no engine answered on it; check that dockerd is healthy, %s (%v)", path, otherEngine, err)
	case errors.Is(derr, fs.ErrPermission):
		return socketRefusesUser(path)
	case errors.Is(derr, fs.ErrNotExist):
		return fmt.Sprintf("there is no Docker Engine socket at %s: start the engine (for example sudo systemctl start docker), %s", path, otherEngine)
	case errors.Is(derr, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing listens on the Docker Engine socket %s (an engine that stopped left it): start the engine (for example sudo systemctl start docker), %s", path, otherEngine)
	}
	return fmt.Sprintf("no Docker Engine answers at %s; start one, %s (%v)", host, otherEngine, derr)
}

// socketRefusesUser says that the engine's socket at path exists but this
// process's user may not open it, and what the user can do.
func socketRefusesUser(path string) string {
	uid := strconv.Itoa(os.Geteuid())
	name := userName(uid)
	who := "uid " + uid
	if name != uid {
		who = name + " (uid " + uid + ")"
	} else {
		name = "USER"
	}
	socket, group := path, "docker"
	if fi, err := os.Stat(path); err == nil {
		if uid, gid, ok := fileOwner(fi); ok {
			socket = fmt.Sprintf("%s (owner %s, group %s, mode %04o)", path, userName(uid), groupName(gid), fi.Mode().Perm())
			if fi.Mode().Perm()&0o060 == 0o060 && gid != "0" {
				group = groupName(gid)
			}
		}
	}
	return fmt.Sprintf("the Docker Engine's socket %s exists, but this user, %s, may not open it: "+
		"add the user to the group %s (sudo usermod -aG %s %s, then log in again; whoever may use the socket is in effect root on this host), "+
		"run a rootless engine as this user (dockerd-rootless-setuptool.sh install, then DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock), "+
		"or set DOCKER_HOST to an engine this user may use", socket, who, group, group, name)
}

// userName is the name of the user with the id, or the id itself.
func userName(uid string) string {
	if u, err := user.LookupId(uid); err == nil {
		return u.Username
	}
	return uid
}

// groupName is the name of the group with the id, or the id itself.
func groupName(gid string) string {
	if g, err := user.LookupGroupId(gid); err == nil {
		return g.Name
	}
	return gid
}
