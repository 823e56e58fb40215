package process

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// sweepUser kills every process of host user uid (a run user of the uid
// range, which nothing else runs as).
func sweepUser(uid int) {
	for round := 0; round < 100; round++ {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		found := false
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(filepath.Join("/proc", e.Name()), &st) != nil || int(st.Uid) != uid {
				continue
			}
			found = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !found {
			return
		}
	}
}
