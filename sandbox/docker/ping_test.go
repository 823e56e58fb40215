package docker

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
)

// These tests check what docker mode says when it cannot reach the engine;
// none of them needs an engine that answers (the socket test needs the
// engine's socket), so none skips under -short.

// newUnreachable runs New against DOCKER_HOST=host and returns its error,
// which must say that the sandbox is unavailable.
func newUnreachable(t *testing.T, host string) string {
	t.Helper()
	t.Setenv("DOCKER_HOST", host)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := New(ctx, Config{Image: "codeexec-test-never-used", Languages: []string{"python"}})
	if err == nil {
		_ = r.Close()
		t.Fatalf("New reached an engine at %s", host)
	}
	if !errors.Is(err, sandbox.ErrSandboxUnavailable) {
		t.Errorf("New's error %q does not wrap ErrSandboxUnavailable", err)
	}
	return err.Error()
}

// TestEngineUnreachableSaysWhy: without a socket, or with one that nothing
// listens on, New says which, and what to do.
func TestEngineUnreachableSaysWhy(t *testing.T) {
	dir := t.TempDir()
	stopped := filepath.Join(dir, "stopped.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stopped, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false) // the file stays, as after an engine that died
	_ = l.Close()
	cases := []struct {
		name, host string
		want       []string
	}{
		{"no socket", "unix://" + filepath.Join(dir, "none.sock"),
			[]string{"there is no Docker Engine socket at " + filepath.Join(dir, "none.sock"), "start the engine", "DOCKER_HOST"}},
		{"nothing listens", "unix://" + stopped,
			[]string{"nothing listens on the Docker Engine socket " + stopped, "start the engine", "DOCKER_HOST"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := newUnreachable(t, c.host)
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("New's error does not say %q:\n%s", w, msg)
				}
			}
		})
	}
}

// pingHelperEnv makes the test binary, started with it, run pingHelper
// instead of the tests (see TestMain).
const pingHelperEnv = "CODE_EXEC_TEST_DOCKER_PING_HELPER"

// pingHelper runs, as the user TestEngineSocketRefusesUser started it as,
// refusedMessages and prints them, one a line; or "@@may-use" when this
// user may open the engine's socket after all.
func pingHelper() {
	if c, err := net.Dial("unix", engineSocket()); err == nil {
		_ = c.Close()
		os.Stdout.WriteString("@@may-use\n")
		os.Exit(0)
	}
	newErr, pingErr, err := refusedMessages()
	if err != nil {
		os.Stdout.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString(newErr + "\n" + pingErr + "\n")
	os.Exit(0)
}

// refusedMessages returns what the server's start in docker mode (New)
// and the tests' skip reason (Ping, see engine) say to a user whom the
// engine's socket refuses.
func refusedMessages() (newErr, pingErr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := New(ctx, Config{Image: testImage(), Languages: []string{"python"}})
	if err == nil {
		_ = r.Close()
		return "", "", errors.New("New connected through a socket that refused this user")
	}
	newErr = err.Error()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return "", "", err
	}
	defer cli.Close()
	if err := Ping(ctx, cli); err != nil {
		return newErr, err.Error(), nil
	}
	return "", "", errors.New("Ping reached the engine through a socket that refused this user")
}

// engineSocket is the path of the engine's local socket, or "" when
// DOCKER_HOST names no local socket.
func engineSocket() string {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = client.DefaultDockerHost
	}
	path, _ := strings.CutPrefix(host, "unix://")
	if path == host {
		return ""
	}
	return path
}

// TestEngineSocketRefusesUser: a user who may not open the real engine's
// socket is told so, by name and uid, with the choices (the group, which is
// root-equivalent; a rootless engine; DOCKER_HOST), not that no engine
// answers. As root the check runs as uid 65534 (a copy of this test binary,
// started as that user); as another user it runs here when the socket
// refuses this user, and skips when it does not.
func TestEngineSocketRefusesUser(t *testing.T) {
	path := engineSocket()
	if path == "" {
		t.Skipf("DOCKER_HOST=%s names no local socket", os.Getenv("DOCKER_HOST"))
	}
	if _, err := os.Stat(path); err != nil {
		skipOrFail(t, "no Docker Engine socket to be refused by: %v", err)
	}
	var msg, skipMsg, uid string
	if os.Geteuid() == 0 {
		uid = "65534"
		out := runAsUser(t, 65534)
		if out == "@@may-use" {
			t.Skipf("uid 65534 may open %s: no user here to be refused", path)
		}
		msg, skipMsg, _ = strings.Cut(out, "\n")
	} else {
		uid = strconv.Itoa(os.Geteuid())
		c, err := net.Dial("unix", path)
		switch {
		case err == nil:
			_ = c.Close()
			t.Skipf("this user (uid %s) may open %s: nothing to refuse", uid, path)
		case !errors.Is(err, fs.ErrPermission):
			skipOrFail(t, "dialling %s: %v", path, err)
		}
		if msg, skipMsg, err = refusedMessages(); err != nil {
			t.Fatal(err)
		}
	}
	if msg != "docker: "+skipMsg {
		t.Errorf("the tests' skip reason (Ping) is not the server's (New):\n%s\n%s", skipMsg, msg)
	}
	who := "uid " + uid
	if u, err := user.LookupId(uid); err == nil {
		who = u.Username + " (uid " + uid + ")"
	}
	t.Logf("New said: %s", msg)
	for _, w := range []string{
		"sandbox unavailable",
		"the Docker Engine's socket " + path,
		"exists, but this user, " + who + ", may not open it",
		"sudo usermod -aG ",
		"in effect root on this host",
		"rootless engine",
		"DOCKER_HOST",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("New's error does not say %q", w)
		}
	}
	if strings.Contains(msg, "no Docker Engine answers") {
		t.Errorf("New's error says no engine answers, though the engine's socket is there")
	}
}
