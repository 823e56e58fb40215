//go:build linux

package process

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// Each run gets a memory and a pids cgroup of its own, below the server's own
// cgroup: on cgroup v1 (root only) one directory in each of the memory and
// pids hierarchies; on cgroup v2 one directory in the unified hierarchy,
// where root or a delegated subtree (systemd's Delegate=yes) allows it. The
// server creates it and opens its cgroup.procs; the exec stage moves itself
// in through that descriptor before the program starts, so that everything
// the program starts is counted together, and the supervisor is not.

// cgroupManager makes the runs' cgroups under one parent per hierarchy.
type cgroupManager struct {
	v2 bool
	// parents are the directories that hold the runs' cgroups: v1 memory
	// and pids, or the single v2 one.
	parents []string
	// leaf is, on v2, the cgroup the server moved itself into so that its
	// parent may enable controllers for its children ("" on v1).
	leaf string
}

// newCgroupManager finds the hierarchies of this process and makes the
// parent of the runs' cgroups, or says why it cannot.
func newCgroupManager() (*cgroupManager, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	name := "codeexec-" + strconv.Itoa(os.Getpid())
	mem, pids := mounts["memory"], mounts["pids"]
	if mem != "" && pids != "" {
		if os.Geteuid() != 0 {
			return nil, errors.New("cgroup v1 needs root")
		}
		m := &cgroupManager{}
		for _, c := range []struct{ mount, ctrl string }{{mem, "memory"}, {pids, "pids"}} {
			dir := filepath.Join(c.mount, own[c.ctrl], name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				m.close()
				return nil, fmt.Errorf("creating %s: %w", dir, err)
			}
			m.parents = append(m.parents, dir)
		}
		return m, nil
	}
	unified := mounts[""]
	if unified == "" {
		return nil, errors.New("no memory and pids cgroup controllers are mounted")
	}
	return newCgroupV2(filepath.Join(unified, own[""]), name)
}

// newCgroupV2 prepares cgroup v2 below the server's cgroup dir: the server
// moves into a leaf of its own (a cgroup with controllers for its children
// may hold no process), memory and pids are enabled for the children, and
// the runs' cgroups go into a sibling parent.
func newCgroupV2(dir, name string) (*cgroupManager, error) {
	ctrls, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	for _, c := range []string{"memory", "pids"} {
		if !strings.Contains(" "+strings.TrimSpace(string(ctrls))+" ", " "+c+" ") {
			return nil, fmt.Errorf("the %s controller is not available to %s (cgroup v2 needs root or a delegated subtree, such as systemd's Delegate=yes)", c, dir)
		}
	}
	if err := writeFile(filepath.Join(dir, "cgroup.procs"), "0"); err != nil {
		return nil, fmt.Errorf("%s is not writable (cgroup v2 needs root or a delegated subtree, such as systemd's Delegate=yes): %w", dir, err)
	}
	m := &cgroupManager{v2: true}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids"); err != nil {
		// The cgroup holds other processes: move them all into a leaf.
		leaf := filepath.Join(dir, name+"-server")
		if err := os.Mkdir(leaf, 0o755); err != nil {
			return nil, err
		}
		m.leaf = leaf
		if err := moveProcs(dir, leaf); err != nil {
			m.close()
			return nil, err
		}
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids"); err != nil {
			m.close()
			return nil, fmt.Errorf("enabling memory and pids for %s: %w", dir, err)
		}
	}
	parent := filepath.Join(dir, name)
	if err := os.Mkdir(parent, 0o755); err != nil {
		m.close()
		return nil, err
	}
	m.parents = []string{parent}
	if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+memory +pids"); err != nil {
		m.close()
		return nil, fmt.Errorf("enabling memory and pids for %s: %w", parent, err)
	}
	return m, nil
}

// moveProcs moves every process of cgroup dir into cgroup to.
func moveProcs(dir, to string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(string(b)) {
		if err := writeFile(filepath.Join(to, "cgroup.procs"), pid); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("moving process %s into %s: %w", pid, to, err)
		}
	}
	return nil
}

// describe says where runs' cgroups go, for sandbox_info.
func (m *cgroupManager) describe() string {
	v := "v1"
	if m.v2 {
		v = "v2"
	}
	return fmt.Sprintf("cgroup %s, under %s", v, strings.Join(m.parents, " and "))
}

// runCgroup is one run's cgroups.
type runCgroup struct {
	v2    bool
	dirs  []string
	procs []*os.File
}

// create makes the cgroups of one run with its limits, and opens their
// cgroup.procs for the exec stage.
func (m *cgroupManager) create(name string, lim sandbox.Limits) (*runCgroup, error) {
	c := &runCgroup{v2: m.v2}
	for _, p := range m.parents {
		dir := filepath.Join(p, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.remove()
			return nil, err
		}
		c.dirs = append(c.dirs, dir)
	}
	if err := c.setLimits(lim); err != nil {
		c.remove()
		return nil, err
	}
	for _, dir := range c.dirs {
		f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			c.remove()
			return nil, err
		}
		c.procs = append(c.procs, f)
	}
	return c, nil
}

// setLimits writes the memory limit (with no swap on top) and the process
// limit.
func (c *runCgroup) setLimits(lim sandbox.Limits) error {
	mem := strconv.FormatInt(lim.MemoryBytes, 10)
	pids := strconv.Itoa(lim.Processes)
	var writes [][2]string
	if c.v2 {
		d := c.dirs[0]
		if lim.MemoryBytes > 0 {
			writes = append(writes, [2]string{filepath.Join(d, "memory.max"), mem}, [2]string{filepath.Join(d, "memory.swap.max"), "0"})
		}
		if lim.Processes > 0 {
			writes = append(writes, [2]string{filepath.Join(d, "pids.max"), pids})
		}
	} else {
		if lim.MemoryBytes > 0 {
			writes = append(writes, [2]string{filepath.Join(c.dirs[0], "memory.limit_in_bytes"), mem}, [2]string{filepath.Join(c.dirs[0], "memory.memsw.limit_in_bytes"), mem})
		}
		if lim.Processes > 0 {
			writes = append(writes, [2]string{filepath.Join(c.dirs[1], "pids.max"), pids})
		}
	}
	for _, w := range writes {
		if err := writeFile(w[0], w[1]); err != nil {
			if errors.Is(err, os.ErrNotExist) && (strings.HasSuffix(w[0], "swap.max") || strings.HasSuffix(w[0], "memsw.limit_in_bytes")) {
				continue // no swap accounting: no swap to limit
			}
			return fmt.Errorf("setting %s: %w", w[0], err)
		}
	}
	return nil
}

// oomKills is how many processes of the run the kernel's OOM killer ended.
func (c *runCgroup) oomKills() int {
	file, key := filepath.Join(c.dirs[0], "memory.events"), "oom_kill"
	if !c.v2 {
		file = filepath.Join(c.dirs[0], "memory.oom_control")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// kill ends every process left in the run's cgroups and reports whether
// any was found.
func (c *runCgroup) kill() bool {
	found := false
	for round := 0; round < 1000; round++ {
		var pids []int
		for _, d := range c.dirs {
			pids = append(pids, readPids(filepath.Join(d, "cgroup.procs"))...)
		}
		if len(pids) == 0 {
			return found
		}
		found = true
		if c.v2 && writeFile(filepath.Join(c.dirs[0], "cgroup.kill"), "1") == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
	return found
}

// remove kills what is left and deletes the cgroups. Safe to call twice.
func (c *runCgroup) remove() {
	for _, f := range c.procs {
		f.Close()
	}
	c.procs = nil
	if len(c.dirs) == 0 {
		return
	}
	c.kill()
	for _, d := range c.dirs {
		for i := 0; i < 200; i++ {
			if err := syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	c.dirs = nil
}

// close deletes the runs' parents (and, on v2, moves the server back).
func (m *cgroupManager) close() {
	for _, p := range m.parents {
		_ = syscall.Rmdir(p)
	}
	m.parents = nil
	if m.leaf != "" {
		_ = moveProcs(m.leaf, filepath.Dir(m.leaf))
		_ = syscall.Rmdir(m.leaf)
		m.leaf = ""
	}
}

func readPids(file string) []int {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func writeFile(name, value string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// cgroupMounts maps each v1 controller ("memory", "pids", ...) to its
// mount point, and "" to the cgroup v2 mount, from /proc/self/mountinfo.
func cgroupMounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseCgroupMounts(f)
}

func parseCgroupMounts(r interface{ Read([]byte) (int, error) }) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 {
			continue
		}
		switch tail[0] {
		case "cgroup2":
			if _, seen := out[""]; !seen {
				out[""] = fields[4]
			}
		case "cgroup":
			for _, opt := range strings.Split(tail[2], ",") {
				if opt == "memory" || opt == "pids" {
					if _, seen := out[opt]; !seen {
						out[opt] = fields[4]
					}
				}
			}
		}
	}
	return out, sc.Err()
}

// ownCgroups maps each v1 controller to this process's cgroup path in it,
// and "" to its cgroup v2 path, from /proc/self/cgroup.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	return parseOwnCgroups(string(b)), nil
}

func parseOwnCgroups(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}
