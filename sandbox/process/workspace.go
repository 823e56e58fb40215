package process

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
)

// runUsers is who the runs are on the host, for the workspace check: the
// host users of the uid range (a root server's runs: each a user of its
// own, in no group, so that a folder's permissions for others are what
// applies to them), or the server's own user.
type runUsers struct {
	// uidRange: the runs are the users of rng; otherwise the server's user.
	uidRange bool
	rng      UIDRange
	// parents: runs resolve the workspace's host path themselves, so each
	// parent must let them search it (a user namespace binds it as the
	// run's user; without a mount namespace runs see it at its own path).
	parents bool
}

// Permission bits, as in a mode's "others" digit and access(2).
const (
	permRead   = 4
	permWrite  = 2
	permSearch = 1
)

// may reports whether the runs may use path (whose Lstat is fi) as want
// says (permRead, permWrite, permSearch, or'ed).
func (u runUsers) may(path string, fi fs.FileInfo, want uint32) bool {
	if u.uidRange {
		return uint32(fi.Mode().Perm())&want == want
	}
	return access(path, want) == nil
}

// who names the runs' users and the permission class that applies to
// them, for messages.
func (u runUsers) who() string {
	if u.uidRange {
		return "each run is a host user of its own from CODE_EXEC_PROCESS_UID_RANGE=" + u.rng.String() + ", in no group, so a folder's permissions for others apply to them"
	}
	uid := strconv.Itoa(os.Geteuid())
	name := "uid " + uid
	if usr, err := user.LookupId(uid); err == nil {
		name = usr.Username + " (uid " + uid + ")"
	}
	return "runs are this server's user, " + name
}

// class is the chmod class of the runs' users: o (others) or u (the
// owner, the server's user).
func (u runUsers) class() string {
	if u.uidRange {
		return "o"
	}
	return "u"
}

// checkWorkspace refuses a workspace that the runs cannot use as
// configured: they must read and search the folder (and write it with
// CODE_EXEC_WORKSPACE_MODE=rw) and, where they resolve its path, search
// each parent. The error names what lacks which permission and the exact
// command that fixes it.
func (u runUsers) checkWorkspace(w sandbox.Workspace) error {
	type lack struct{ path, perm, says string }
	var lacks []lack
	if u.parents {
		for d := filepath.Dir(w.Dir); ; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && !u.may(d, fi, permSearch) {
				lacks = append([]lack{{d, "x", "search"}}, lacks...)
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	fi, err := os.Stat(w.Dir)
	if err != nil {
		return fmt.Errorf("process mode: the workspace %q (CODE_EXEC_WORKSPACE): %w", w.Dir, err)
	}
	perm, says, want := "rx", "read and search", uint32(permRead|permSearch)
	if w.Writable {
		perm, says, want = "rwx", "read, write and search (CODE_EXEC_WORKSPACE_MODE=rw)", permRead|permWrite|permSearch
	}
	also := ""
	if !u.may(w.Dir, fi, want) {
		lacks = append(lacks, lack{w.Dir, perm, says})
		if w.Writable && u.uidRange {
			also = " (any user of this host may then write in it)"
		}
	}
	if len(lacks) == 0 {
		return nil
	}
	var what, fix []string
	for _, l := range lacks {
		what = append(what, fmt.Sprintf("%s (mode %04o) does not let them %s", l.path, modeOf(l.path), l.says))
		fix = append(fix, "chmod "+u.class()+"+"+l.perm+" "+l.path)
	}
	return fmt.Errorf("process mode: the runs cannot use the workspace %s (CODE_EXEC_WORKSPACE): %s, and %s; run %s%s, or set CODE_EXEC_WORKSPACE to a folder they may use",
		w.Dir, u.who(), strings.Join(what, "; "), strings.Join(fix, " && "), also)
}

// maxWorkspaceEntries bounds the entries of the workspace that
// unreadableBelow looks at.
const maxWorkspaceEntries = 10000

// unreadableBelow says, in a warning, which entries below the workspace
// dir the runs cannot read (a file without read permission, a folder
// without read and search), with the command that fixes it; "" when there
// is none among the first maxWorkspaceEntries. Links are not followed.
func (u runUsers) unreadableBelow(dir string) string {
	var bad []string
	seen := 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if p == dir {
			return nil
		}
		if seen++; seen > maxWorkspaceEntries {
			return filepath.SkipAll
		}
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil || !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil
		}
		want := uint32(permRead)
		if fi.IsDir() {
			want |= permSearch
		}
		if !u.may(p, fi, want) {
			rel, _ := filepath.Rel(dir, p)
			bad = append(bad, rel)
			if fi.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	if len(bad) == 0 {
		return ""
	}
	names := bad
	if len(names) > 3 {
		names = append(names[:3:3], "…")
	}
	checked := ""
	if seen > maxWorkspaceEntries {
		checked = fmt.Sprintf(" among the first %d", maxWorkspaceEntries)
	}
	entries := "entries"
	if len(bad) == 1 {
		entries = "entry"
	}
	return fmt.Sprintf("the runs cannot read %d %s%s of the workspace %s (%s): %s; run chmod -R %s+rX %s to let them",
		len(bad), entries, checked, dir, strings.Join(names, ", "), u.who(), u.class(), dir)
}

// modeOf is the permission bits of path, or 0 when it cannot be read.
func modeOf(path string) fs.FileMode {
	if fi, err := os.Stat(path); err == nil {
		return fi.Mode().Perm()
	}
	return 0
}
