package docker

import (
	"fmt"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
)

// workspaceProbe is what the probe container runs after
// runproto.ProbeScript when there is a workspace, as the user code runs as,
// with the workspace mounted as runs have it: whether that user may read
// and search the folder (@@workspace-read) and write it
// (@@workspace-write), and the first entries below it, among the first
// 10000, that it cannot read (@@workspace-unreadable PATH). Links are not
// followed.
const workspaceProbe = `w=` + sandbox.WorkspacePath + `
if [ -r "$w" ] && [ -x "$w" ]; then echo '@@workspace-read'; fi
if [ -w "$w" ]; then echo '@@workspace-write'; fi
find "$w" -mindepth 1 2>/dev/null | head -n 10000 | while IFS= read -r p; do
  if [ -L "$p" ]; then continue; fi
  if [ -d "$p" ]; then if [ -r "$p" ] && [ -x "$p" ]; then continue; fi
  elif [ ! -f "$p" ] || [ -r "$p" ]; then continue; fi
  echo "@@workspace-unreadable ${p#"$w"/}"
done | head -n 4
`

// checkWorkspace reads what workspaceProbe printed (the probe's other
// lines): an error that stops the server when the runs cannot use the
// workspace as configured (read and search it; write it with
// CODE_EXEC_WORKSPACE_MODE=rw), naming the fix, and a warning that names
// the entries below it that they cannot read ("" for none).
func (r *Runner) checkWorkspace(lines []string) (warning string, err error) {
	w := r.cfg.Workspace
	if w == nil {
		return "", nil
	}
	var read, write bool
	var unreadable []string
	for _, l := range lines {
		switch {
		case l == "@@workspace-read":
			read = true
		case l == "@@workspace-write":
			write = true
		case strings.HasPrefix(l, "@@workspace-unreadable "):
			unreadable = append(unreadable, strings.TrimPrefix(l, "@@workspace-unreadable "))
		}
	}
	who := "code runs as uid " + r.uid + " in the containers"
	if r.engine.userns || r.engine.rootless {
		who += " (a uid of the engine's user namespace on its host)"
	}
	perm, says := "", ""
	switch {
	case !read && w.Writable:
		perm, says = "rwx", "read, write and search"
	case !read:
		perm, says = "rx", "read and search"
	case w.Writable && !write:
		perm, says = "rwx", "write (CODE_EXEC_WORKSPACE_MODE=rw)"
	}
	if perm != "" {
		acl := ""
		if !r.engine.userns && !r.engine.rootless {
			acl = " (or setfacl -m u:" + r.uid + ":" + perm + " " + w.Dir + ", for that uid alone)"
		}
		return "", fmt.Errorf("docker: the runs cannot use the workspace %s (CODE_EXEC_WORKSPACE): %s, and the folder's permissions on the engine's host do not let it %s the folder; run chmod o+%s %s there%s, or set CODE_EXEC_WORKSPACE to a folder it may use",
			w.Dir, who, says, perm, w.Dir, acl)
	}
	if len(unreadable) == 0 {
		return "", nil
	}
	if len(unreadable) > 3 {
		unreadable = append(unreadable[:3:3], "…")
	}
	return fmt.Sprintf("the runs cannot read entries of the workspace %s (%s): %s; run chmod -R o+rX %s on the engine's host to let them",
		w.Dir, strings.Join(unreadable, ", "), who, w.Dir), nil
}
