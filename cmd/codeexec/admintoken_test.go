package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddrKey(t *testing.T) {
	t.Parallel()
	same := []string{"127.0.0.1:8081", "localhost:8081", ":8081", "0.0.0.0:8081"}
	for _, a := range same {
		if got := addrKey(a); got != "127.0.0.1-8081" {
			t.Errorf("addrKey(%q) = %q, want 127.0.0.1-8081", a, got)
		}
	}
	if addrKey("[::1]:8081") == addrKey("127.0.0.1:8081") || addrKey("127.0.0.1:8082") == addrKey("127.0.0.1:8081") {
		t.Error("different consoles share a token file")
	}
	if k := addrKey("[::1]:8081"); strings.ContainsAny(k, ":/[]") {
		t.Errorf("addrKey(::1) = %q: not a plain file name", k)
	}
}

// TestAdminTokenFile: the token is written 0600 in a 0700 directory of
// this user's, found by the CLI by the console's address, and removed at
// the end only if it is still this server's.
func TestAdminTokenFile(t *testing.T) {
	t.Parallel()
	runtimeDir := t.TempDir()
	env := map[string]string{"XDG_RUNTIME_DIR": runtimeDir, "HOME": "/nonexistent"}
	path, explicit, err := adminTokenFile(env, "127.0.0.1:40123")
	if err != nil || explicit || path != filepath.Join(runtimeDir, "codeexec", "admin-127.0.0.1-40123.token") {
		t.Fatalf("adminTokenFile = %q, %v, %v", path, explicit, err)
	}
	token := newAdminToken()
	if len(token) != 64 || token == newAdminToken() {
		t.Fatalf("newAdminToken = %q", token)
	}
	remove, err := writeAdminToken(path, explicit, token)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Fatalf("token directory mode %v, want 0700", di.Mode().Perm())
	}
	if got, err := readAdminToken(env, "localhost:40123"); err != nil || got != token {
		t.Fatalf("readAdminToken = %q, %v", got, err)
	}
	env2 := map[string]string{"XDG_RUNTIME_DIR": runtimeDir, "CODE_EXEC_ADMIN_TOKEN": "from-the-environment-0123"}
	if got, _ := readAdminToken(env2, "127.0.0.1:40123"); got != "from-the-environment-0123" {
		t.Fatalf("CODE_EXEC_ADMIN_TOKEN does not win over the file: %q", got)
	}
	if _, err := readAdminToken(env, "127.0.0.1:40124"); err == nil || !strings.Contains(err.Error(), "admin-127.0.0.1-40124.token") {
		t.Fatalf("no file for another console: %v", err)
	}

	// A newer server's token is not removed by the older one.
	if err := os.WriteFile(path, []byte("someone-else\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	remove()
	if _, err := os.Stat(path); err != nil {
		t.Fatal("removed a token file that another server wrote")
	}
	remove2, err := writeAdminToken(path, explicit, token)
	if err != nil {
		t.Fatal(err)
	}
	remove2()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the token file is still there after cleanup: %v", err)
	}

	// codeexec's own directory must be private.
	open := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := writeAdminToken(filepath.Join(open, "admin.token"), false, token); err == nil || !strings.Contains(err.Error(), "open to other users") {
		t.Fatalf("a directory open to others was accepted: %v", err)
	}
	// An explicit CODE_EXEC_ADMIN_TOKEN_FILE is the operator's choice; the file is still 0600.
	explicitPath := filepath.Join(open, "admin.token")
	env3 := map[string]string{"CODE_EXEC_ADMIN_TOKEN_FILE": explicitPath}
	if p, explicit, _ := adminTokenFile(env3, "127.0.0.1:1"); p != explicitPath || !explicit {
		t.Fatalf("CODE_EXEC_ADMIN_TOKEN_FILE ignored: %q", p)
	}
	if _, err := writeAdminToken(explicitPath, true, token); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(explicitPath); fi.Mode().Perm() != 0o600 {
		t.Fatalf("explicit token file mode %v", fi.Mode().Perm())
	}
}

// TestApprovalsCLIFindsTheTokenFile: without CODE_EXEC_ADMIN_TOKEN the CLI
// reads the token the server wrote for that address.
func TestApprovalsCLIFindsTheTokenFile(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, testAdminToken)
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	env := map[string]string{"XDG_RUNTIME_DIR": t.TempDir()}
	path, explicit, err := adminTokenFile(env, addr)
	if err != nil {
		t.Fatal(err)
	}
	environ := []string{"CODE_EXEC_ADMIN_ADDR=" + addr, "XDG_RUNTIME_DIR=" + env["XDG_RUNTIME_DIR"]}
	var out, errb bytes.Buffer
	if code := approvalsCommand([]string{"list"}, environ, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no admin token") {
		t.Fatalf("list without a token file = %d %q", code, errb.String())
	}
	if _, err := writeAdminToken(path, explicit, testAdminToken); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := approvalsCommand([]string{"list"}, environ, &out, &errb); code != 0 || !strings.Contains(out.String(), "No run is waiting") {
		t.Fatalf("list with the token file = %d %q %q", code, out.String(), errb.String())
	}
}

// TestAdminTokenFileFolders: the token file, CODE_EXEC_ADMIN_TOKEN_FILE
// too, is refused, by the server that writes it and by the CLI that reads
// it, when another user could replace it: a folder on its path that
// belongs to another user, or that group or others may write (unless it
// is sticky, as /tmp is), and for the CLI a file of another user's or one
// that others may read.
func TestAdminTokenFileFolders(t *testing.T) {
	t.Parallel()
	token := newAdminToken()
	mkdir := func(t *testing.T, path string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	refused := func(t *testing.T, path, want string) {
		t.Helper()
		env := map[string]string{"CODE_EXEC_ADMIN_TOKEN_FILE": path}
		p, explicit, err := adminTokenFile(env, "127.0.0.1:1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writeAdminToken(p, explicit, token); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("writing %s: %v, want a refusal saying %q", path, err, want)
		}
		if _, err := os.Stat(path); err == nil {
			t.Errorf("the token was written to %s", path)
		}
	}
	t.Run("a folder of another user's", func(t *testing.T) {
		t.Parallel()
		if os.Geteuid() != 0 {
			t.Skip("only root can give a folder to another user (uid 65534) for this test")
		}
		theirs := mkdir(t, filepath.Join(t.TempDir(), "theirs"), 0o755)
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		refused(t, filepath.Join(theirs, "admin.token"), "belongs to another user")
		// Also higher up the path: the other user could rename the folder below.
		mine := mkdir(t, filepath.Join(theirs, "mine"), 0o700)
		refused(t, filepath.Join(mine, "admin.token"), "belongs to another user")
		// The CLI does not read a token file of another user's either.
		ok := mkdir(t, filepath.Join(t.TempDir(), "ok"), 0o700)
		planted := filepath.Join(ok, "admin.token")
		if err := os.WriteFile(planted, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(planted, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := readAdminToken(map[string]string{"CODE_EXEC_ADMIN_TOKEN_FILE": planted}, "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "belongs to another user") {
			t.Errorf("reading a token file of another user's: %v, want a refusal", err)
		}
	})
	t.Run("a folder that others may write", func(t *testing.T) {
		t.Parallel()
		base := t.TempDir()
		group := mkdir(t, filepath.Join(base, "group"), 0o775)
		refused(t, filepath.Join(group, "admin.token"), "writable by other users")
		refused(t, filepath.Join(mkdir(t, filepath.Join(group, "below"), 0o700), "admin.token"), "writable by other users")
		world := mkdir(t, filepath.Join(base, "world"), 0o757)
		refused(t, filepath.Join(world, "admin.token"), "writable by other users")
	})
	t.Run("a sticky folder, and the file itself", func(t *testing.T) {
		t.Parallel()
		// A sticky folder (as /tmp): others may not rename or remove what
		// is ours in it.
		sticky := mkdir(t, filepath.Join(t.TempDir(), "sticky"), 0o777|os.ModeSticky)
		path := filepath.Join(mkdir(t, filepath.Join(sticky, "mine"), 0o700), "admin.token")
		env := map[string]string{"CODE_EXEC_ADMIN_TOKEN_FILE": path}
		if _, err := writeAdminToken(path, true, token); err != nil {
			t.Fatalf("a folder of mine below a sticky one: %v", err)
		}
		if got, err := readAdminToken(env, "127.0.0.1:1"); err != nil || got != token {
			t.Fatalf("readAdminToken = %q, %v", got, err)
		}
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readAdminToken(env, "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "other users may read") {
			t.Errorf("reading a token file others may read: %v, want a refusal", err)
		}
	})
}
