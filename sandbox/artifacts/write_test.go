//go:build unix

package artifacts_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// Not parallel: it changes the process's umask.
func TestWriteCreatesFilesAndFolders(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077) // the modes must not depend on the server's umask
	defer syscall.Umask(old)
	in := decode(t,
		artifacts.File{Path: "data.csv", Content: "a,b\n"},
		artifacts.File{Path: "in/deep/x.txt", Content: "x"},
		artifacts.File{Path: "in/y.txt", Content: "y"},
	)
	snap, err := artifacts.Write(dir, in, artifacts.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range in {
		got, err := os.ReadFile(filepath.Join(dir, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(f.Data) {
			t.Errorf("%s holds %q, want %q", f.Path, got, f.Data)
		}
		fi, _ := os.Stat(filepath.Join(dir, f.Path))
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s has mode %v, want 0644", f.Path, fi.Mode().Perm())
		}
		if !snap.Has(f.Path) {
			t.Errorf("the snapshot lacks %s", f.Path)
		}
	}
	for _, d := range []string{"in", "in/deep"} {
		fi, err := os.Stat(filepath.Join(dir, d))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
			t.Errorf("folder %s: %v %v, want a folder with mode 0755", d, fi, err)
		}
	}
	if snap.Len() != 3 {
		t.Errorf("snapshot has %d entries, want 3", snap.Len())
	}
}

func TestWriteNeverFollowsALink(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("a link where a folder goes", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
			t.Fatal(err)
		}
		_, err := artifacts.Write(dir, decode(t, artifacts.File{Path: "sub/secret.txt", Content: "pwned"}), artifacts.WriteOptions{})
		if !errors.Is(err, artifacts.ErrInvalidFile) || !strings.Contains(err.Error(), `files[0] "sub/secret.txt": needs "sub" to be a folder`) {
			t.Errorf("Write through a linked folder: %v", err)
		}
		if b, _ := os.ReadFile(secret); string(b) != "host file" {
			t.Errorf("the host file was written through the link: %q", b)
		}
		if _, err := os.Stat(filepath.Join(outside, "sub")); err == nil {
			t.Error("a folder was made outside")
		}
	})
	t.Run("a link where the file goes", func(t *testing.T) {
		dir := t.TempDir()
		link := filepath.Join(dir, "data.csv")
		if err := os.Symlink(secret, link); err != nil {
			t.Fatal(err)
		}
		if _, err := artifacts.Write(dir, decode(t, artifacts.File{Path: "data.csv", Content: "new"}), artifacts.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(secret); string(b) != "host file" {
			t.Errorf("the host file was written through the link: %q", b)
		}
		fi, err := os.Lstat(link)
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("data.csv is %v (%v), want the regular file that replaced the link", fi, err)
		}
		if b, _ := os.ReadFile(link); string(b) != "new" {
			t.Errorf("data.csv holds %q", b)
		}
	})
	t.Run("a file where a folder goes", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "a"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := artifacts.Write(dir, decode(t, artifacts.File{Path: "ok", Content: "1"}, artifacts.File{Path: "a/b", Content: "2"}), artifacts.WriteOptions{})
		if !errors.Is(err, artifacts.ErrInvalidFile) || !strings.Contains(err.Error(), `files[1] "a/b"`) {
			t.Errorf("Write below a file: %v", err)
		}
	})
	t.Run("a folder where the file goes", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "a"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := artifacts.Write(dir, decode(t, artifacts.File{Path: "a", Content: "2"}), artifacts.WriteOptions{})
		if !errors.Is(err, artifacts.ErrInvalidFile) || !strings.Contains(err.Error(), "is a folder in the working directory already") {
			t.Errorf("Write over a folder: %v", err)
		}
	})
}

func TestWriteHandsFilesToTheRunUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	dir := t.TempDir()
	in := decode(t, artifacts.File{Path: "d/f.txt", Content: "x"})
	if _, err := artifacts.Write(dir, in, artifacts.WriteOptions{Chown: true, UID: 65534, GID: 65534}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"d", "d/f.txt"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s is owned by %d:%d, want 65534:65534", p, st.Uid, st.Gid)
		}
	}
}
