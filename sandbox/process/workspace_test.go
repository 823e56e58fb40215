package process

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
)

// TestWorkspaceCheck: for the host users of the uid range, whom a folder's
// permissions for others govern, a workspace they cannot use is refused
// with the command that fixes it, and entries below it they cannot read
// are named in a warning. (Mode bits alone: this runs as any user.)
func TestWorkspaceCheck(t *testing.T) {
	t.Parallel()
	rng := UIDRange{First: 60000, Last: 60009}
	mk := func(t *testing.T, parentMode, dirMode os.FileMode) (parent, dir string) {
		t.Helper()
		tmp := t.TempDir()
		for _, p := range []string{filepath.Dir(tmp), tmp} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		parent = filepath.Join(tmp, "parent")
		dir = filepath.Join(parent, "project")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, dirMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(parent, parentMode); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(parent, 0o755); _ = os.Chmod(dir, 0o755) })
		return parent, dir
	}
	for _, c := range []struct {
		name                string
		parentMode, dirMode os.FileMode
		writable, parents   bool
		fix                 string // "" when the workspace is accepted
	}{
		{"readable", 0o755, 0o755, false, true, ""},
		{"private folder", 0o755, 0o700, false, true, "chmod o+rx DIR"},
		{"private parent", 0o700, 0o755, false, true, "chmod o+x PARENT"},
		{"private parent, bound by root", 0o700, 0o755, false, false, ""},
		{"both", 0o711, 0o750, false, true, "chmod o+rx DIR"},
		{"rw without write", 0o755, 0o755, true, true, "chmod o+rwx DIR (any user of this host may then write in it)"},
		{"rw", 0o755, 0o777, true, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			parent, dir := mk(t, c.parentMode, c.dirMode)
			err := runUsers{uidRange: true, rng: rng, parents: c.parents}.checkWorkspace(sandbox.Workspace{Dir: dir, Writable: c.writable})
			if c.fix == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			fix := strings.NewReplacer("DIR", dir, "PARENT", parent).Replace(c.fix)
			if err == nil || !strings.Contains(err.Error(), "run "+fix) || !strings.Contains(err.Error(), "CODE_EXEC_PROCESS_UID_RANGE=60000-60009") {
				t.Fatalf("err = %v, want one that says run %s", err, fix)
			}
		})
	}
	t.Run("entries runs cannot read", func(t *testing.T) {
		t.Parallel()
		_, dir := mk(t, 0o755, 0o755)
		for p, m := range map[string]os.FileMode{"open.txt": 0o644, "secret.key": 0o600, "private/inner.txt": 0o644, "deep/er/hidden": 0o640} {
			p = filepath.Join(dir, p)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), m); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(filepath.Join(dir, "private"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/etc/shadow", filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
		u := runUsers{uidRange: true, rng: rng, parents: true}
		w := u.unreadableBelow(dir)
		for _, s := range []string{"cannot read 3 entries of the workspace " + dir, "deep/er/hidden", "private", "secret.key", "run chmod -R o+rX " + dir} {
			if !strings.Contains(w, s) {
				t.Errorf("the warning does not say %q: %s", s, w)
			}
		}
		for _, s := range []string{"inner.txt", "open.txt", "link"} {
			if strings.Contains(w, s) {
				t.Errorf("the warning names %s: %s", s, w)
			}
		}
		if err := os.Chmod(filepath.Join(dir, "private"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"secret.key", "deep/er/hidden"} {
			if err := os.Chmod(filepath.Join(dir, p), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if w := u.unreadableBelow(dir); w != "" {
			t.Errorf("after the fix: %s", w)
		}
	})
}
