package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// The approvals console and its API always need a token. When the operator
// sets none (CODE_EXEC_ADMIN_TOKEN), the server makes one at start and
// writes it to a file that only its user can read, as Jupyter does; the
// `codeexec approvals` CLI of the same user finds it there by the console's
// address, so nobody copies a token by hand.

// newAdminToken returns a random token (256 bits, hex).
func newAdminToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("codeexec: no randomness for the admin token: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// adminTokenFile is where the token of the console at addr (host:port) is
// kept: CODE_EXEC_ADMIN_TOKEN_FILE if set, else admin-HOST-PORT.token in
// codeexec's private directory (see privateDir).
func adminTokenFile(env map[string]string, addr string) (path string, explicit bool, err error) {
	if f := env["CODE_EXEC_ADMIN_TOKEN_FILE"]; f != "" {
		return f, true, nil
	}
	dir, err := privateDir(env)
	if err != nil {
		return "", false, err
	}
	return filepath.Join(dir, "admin-"+addrKey(addr)+".token"), false, nil
}

// privateDir is codeexec's per-user directory for runtime files:
// $XDG_RUNTIME_DIR/codeexec (a per-user tmpfs on most Linux desktops and
// servers), else codeexec in the user's cache directory.
func privateDir(env map[string]string) (string, error) {
	if d := env["XDG_RUNTIME_DIR"]; filepath.IsAbs(d) {
		return filepath.Join(d, "codeexec"), nil
	}
	if d := env["XDG_CACHE_HOME"]; filepath.IsAbs(d) && runtime.GOOS != "darwin" {
		return filepath.Join(d, "codeexec"), nil
	}
	home := env["HOME"]
	if !filepath.IsAbs(home) {
		return "", errors.New("neither XDG_RUNTIME_DIR nor HOME is set, so there is no private directory for the approvals console's token: set CODE_EXEC_ADMIN_TOKEN_FILE or CODE_EXEC_ADMIN_TOKEN")
	}
	if runtime.GOOS == "darwin" {
		return filepath.Join(home, "Library", "Caches", "codeexec"), nil
	}
	return filepath.Join(home, ".cache", "codeexec"), nil
}

// addrKey names a console address in a file name ("127.0.0.1-8081"), the
// same for every way of writing a loopback address (localhost, :8081).
func addrKey(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, ""
	}
	switch strings.ToLower(host) {
	case "", "localhost", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return strings.NewReplacer(":", "_", "/", "_", "%", "_").Replace(host) + "-" + port
}

// writeAdminToken writes token to path, readable and writable by this user
// only, and returns a func that removes the file if it still holds token.
// In codeexec's own directory (not explicit), the directory is made 0700
// and refused if another user owns it or may enter it.
func writeAdminToken(path string, explicit bool, token string) (remove func(), err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot make the directory of the admin token file: %w", err)
	}
	if !explicit {
		if err := checkPrivate(dir); err != nil {
			return nil, err
		}
	}
	if err := checkFolders(dir); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".admin-*.token") // mode 0600
	if err != nil {
		return nil, fmt.Errorf("cannot write the admin token file: %w", err)
	}
	_, werr := f.WriteString(token + "\n")
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), 0o600)); err != nil {
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("cannot write the admin token file: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("cannot write the admin token file %s: %w", path, err)
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == token {
			_ = os.Remove(path)
		}
	}, nil
}

// checkPrivate refuses a directory that is not this user's alone.
func checkPrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory: remove it, or set CODE_EXEC_ADMIN_TOKEN_FILE", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("the directory %s of the admin token file is open to other users (mode %v): chmod 700 it, or set CODE_EXEC_ADMIN_TOKEN_FILE", dir, fi.Mode().Perm())
	case !ownedByMe(fi):
		return fmt.Errorf("the directory %s of the admin token file belongs to another user: remove it, or set CODE_EXEC_ADMIN_TOKEN_FILE", dir)
	}
	return nil
}

// checkFolders refuses the folder of the admin token file when another user
// could replace the file, as ssh does for its keys: dir and every folder
// above it, up to the root, both as written and with symbolic links
// resolved, must belong to root or to this process's user, and none may be
// writable by group or others unless it is sticky (as /tmp is: others may
// then not rename or remove what is ours in it). A symbolic link on the
// way is judged by its owner, and its target by the folders it resolves to.
func checkFolders(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("the folder of the admin token file: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("the folder of the admin token file: %w", err)
	}
	for _, start := range []string{abs, real} {
		for d := start; ; d = filepath.Dir(d) {
			fi, err := os.Lstat(d)
			if err != nil {
				return fmt.Errorf("the folder of the admin token file: %w", err)
			}
			if uid, ok := ownerOf(fi); ok && uid != 0 && uid != os.Geteuid() {
				return fmt.Errorf("the folder %s on the path of the admin token file belongs to another user (uid %d), who could replace the token: choose a CODE_EXEC_ADMIN_TOKEN_FILE whose folders belong to root or to this user, or set CODE_EXEC_ADMIN_TOKEN", d, uid)
			}
			if fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
				return fmt.Errorf("the folder %s on the path of the admin token file is writable by other users (mode %v), who could replace the token: chmod go-w it, choose another CODE_EXEC_ADMIN_TOKEN_FILE, or set CODE_EXEC_ADMIN_TOKEN", d, fi.Mode().Perm())
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return nil
}

// checkTokenFile refuses, for the CLI, a token file that another user could
// have written or may read: it must be a regular file of this user's (or
// root's), readable by nobody else, in folders that checkFolders accepts.
func checkTokenFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	uid, known := ownerOf(fi)
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("the admin token file %s is not a regular file: remove it, or set CODE_EXEC_ADMIN_TOKEN", path)
	case known && uid != 0 && uid != os.Geteuid():
		return fmt.Errorf("the admin token file %s belongs to another user (uid %d), so it is not this user's server's token: remove it, or set CODE_EXEC_ADMIN_TOKEN", path, uid)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("the admin token file %s is open to other users (mode %v: other users may read or change it), so its token is not secret: chmod 600 it, or set CODE_EXEC_ADMIN_TOKEN", path, fi.Mode().Perm())
	}
	return checkFolders(filepath.Dir(path))
}

// readAdminToken finds the token of the console at addr for the CLI:
// CODE_EXEC_ADMIN_TOKEN, else the file the server wrote.
func readAdminToken(env map[string]string, addr string) (string, error) {
	if t := env["CODE_EXEC_ADMIN_TOKEN"]; t != "" {
		return t, nil
	}
	path, _, err := adminTokenFile(env, addr)
	if err != nil {
		return "", err
	}
	err = checkTokenFile(path)
	var b []byte
	if err == nil {
		b, err = os.ReadFile(path)
	}
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no admin token: a running codeexec with approvals on writes one to %s (is it running, as this user, with the same CODE_EXEC_ADMIN_ADDR?); or set CODE_EXEC_ADMIN_TOKEN", path)
	}
	if err != nil {
		return "", fmt.Errorf("reading the admin token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
