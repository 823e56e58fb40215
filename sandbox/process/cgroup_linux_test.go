//go:build linux

package process

import (
	"strings"
	"testing"
)

func TestParseCgroupMounts(t *testing.T) {
	t.Parallel()
	hybrid := `25 30 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
30 25 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
31 25 0:28 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,pids
32 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,cpu,cpuacct
`
	got, err := parseCgroupMounts(strings.NewReader(hybrid))
	if err != nil || got["memory"] != "/sys/fs/cgroup/memory" || got["pids"] != "/sys/fs/cgroup/pids" || got[""] != "/sys/fs/cgroup/unified" {
		t.Fatalf("hybrid: %v %v", got, err)
	}
	v2 := "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
	got, _ = parseCgroupMounts(strings.NewReader(v2))
	if got["memory"] != "" || got[""] != "/sys/fs/cgroup" {
		t.Fatalf("v2: %v", got)
	}
}

func TestParseOwnCgroups(t *testing.T) {
	t.Parallel()
	got := parseOwnCgroups("9:name=systemd:/\n8:pids:/a\n4:memory:/process_api/x\n1:cpu,cpuacct:/c\n0::/user.slice/u.service\n")
	want := map[string]string{"name=systemd": "/", "pids": "/a", "memory": "/process_api/x", "cpu": "/c", "cpuacct": "/c", "": "/user.slice/u.service"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("controller %q: %q, want %q", k, got[k], v)
		}
	}
}
