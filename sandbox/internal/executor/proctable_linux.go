//go:build linux

package executor

import (
	"os"
	"strconv"
	"strings"

	"github.com/codeexec/codeexec/sandbox/internal/procfs"
)

// procInfo is what the process table says of one process.
type procInfo struct {
	ppid   int
	zombie bool
}

// procTable reads the parent and state of every process from /proc.
func procTable() map[int]procInfo {
	out := map[int]procInfo{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out[pid] = procInfo{ppid: ppid, zombie: (f[0] == "Z" || f[0] == "X") && procfs.LiveTask("/proc/"+strconv.Itoa(pid)) == ""}
	}
	return out
}

// subtree lists the descendants of pid.
func subtree(procs map[int]procInfo, pid int) []int {
	kids := map[int][]int{}
	for c, info := range procs {
		kids[info.ppid] = append(kids[info.ppid], c)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, kids[p]...)
		queue = append(queue, kids[p]...)
	}
	return out
}
