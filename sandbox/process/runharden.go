package process

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// runSeq numbers the runs' cgroups.
var runSeq atomic.Int64

// runGuard is what one run holds beyond its directory: its host user (from
// the uid range, when the server is root) and its cgroups (where the host
// allows them). end gives both back once nothing of the run is left.
type runGuard struct {
	r    *Runner
	iso  executor.Isolation
	cred *executor.Credential
	uid  *uidLease // from the pool, or nil
	cg   *runCgroup
}

// guard takes a host user and makes the cgroups for a run, waiting for a
// free host user.
func (r *Runner) guard(ctx context.Context, lim sandbox.Limits) (*runGuard, error) {
	return r.guardFor(ctx, lim, true)
}

// guardFor takes a host user and makes the cgroups for a run. Without
// wait it returns nil, nil when no host user is free.
func (r *Runner) guardFor(ctx context.Context, lim sandbox.Limits, wait bool) (*runGuard, error) {
	g := &runGuard{r: r, iso: r.iso, cred: r.cred}
	if r.uids != nil {
		var lease *uidLease
		if wait {
			var err error
			if lease, err = r.uids.acquire(ctx); err != nil {
				return nil, err
			}
		} else if lease = r.uids.tryAcquire(); lease == nil {
			return nil, nil
		} else {
			sweepUser(lease.uid)
		}
		g.uid = lease
		uid := lease.uid
		if g.iso.User {
			g.iso.UID, g.iso.GID = uid, uid
		} else {
			g.cred = &executor.Credential{UID: uint32(uid), GID: uint32(uid)}
		}
	}
	if r.cgroups != nil {
		cg, err := r.cgroups.create("run-"+strconv.FormatInt(runSeq.Add(1), 10), lim)
		if err != nil {
			g.end(false)
			return nil, fmt.Errorf("%w: creating the run's cgroup: %v", sandbox.ErrSandboxUnavailable, err)
		}
		g.cg = cg
	}
	return g, nil
}

// owner is the host user that owns the run's directories, when it is not the
// server's own.
func (g *runGuard) owner() (uid, gid int, ok bool) {
	switch {
	case g.iso.User && g.iso.UID != os.Geteuid():
		return g.iso.UID, g.iso.GID, true
	case g.cred != nil:
		return int(g.cred.UID), int(g.cred.GID), true
	}
	return 0, 0, false
}

// cgroupProcs are the files the exec stage joins the cgroups through.
func (g *runGuard) cgroupProcs() []*os.File {
	if g.cg == nil {
		return nil
	}
	return g.cg.procs
}

// finish reports an OOM kill in res.
func (g *runGuard) finish(res *sandbox.Result) {
	if g.cg != nil && res != nil && g.cg.oomKills() > 0 {
		res.OOMKilled = true
	}
}

// end kills whatever of the run is left, in its cgroup and, when the run did
// not end cleanly (a supervisor that died without a status), among the
// processes of its host user; then it gives the user back.
func (g *runGuard) end(clean bool) {
	if g.cg != nil {
		g.cg.remove()
	}
	if g.uid != nil {
		if !clean {
			sweepUser(g.uid.uid)
		}
		g.uid.release()
	}
}

// interpreterArgs are the arguments a language's interpreter gets before its
// own (sandbox.LanguageSpec.Args): node's heap is bounded by the memory limit
// with --max-old-space-size, since node runs without an address-space limit
// (V8 reserves far more address space than it uses, and a limit raised for
// node would be inherited by every process node starts).
func interpreterArgs(lang string, lim sandbox.Limits) []string {
	if lang == "javascript" && lim.MemoryBytes > 0 {
		return []string{"--max-old-space-size=" + strconv.FormatInt(max(lim.MemoryBytes>>20, 16), 10)}
	}
	return nil
}

// setUpRunUsers gives root's server a pool of host users, one per run in
// flight, and says so for sandbox_info.
func (r *Runner) setUpRunUsers(ctx context.Context, disabled []Feature, rng UIDRange) (sandbox.Protection, error) {
	p := sandbox.Protection{Name: protectionName(FeatureUIDRange)}
	switch {
	case slices.Contains(disabled, FeatureUIDRange):
		p.Detail = "turned off by CODE_EXEC_PROCESS_DISABLE: every run is the same host user (uid " + strconv.Itoa(rng.First) + ")"
		if r.cred != nil {
			// Root's runs are that user: keep a server of the whole
			// range from taking it, and from sweeping them.
			f, err := shareUID(ctx, rng.First, uidLockDir)
			if err != nil {
				return p, fmt.Errorf("process mode: the run user %d: %w", rng.First, err)
			}
			r.sharedUID = f
		}
	case runtime.GOOS != "linux":
		p.Detail = "needs Linux"
	case os.Geteuid() != 0:
		p.Detail = fmt.Sprintf("needs root: an ordinary user's server cannot run code as other users, so every run is the server's own host user (uid %d)", os.Geteuid())
	default:
		pool, err := newUIDPool(rng, uidLockDir)
		if err != nil {
			p.Detail = "unavailable: " + err.Error()
			return p, nil
		}
		r.uids = pool
		p.Active = true
		p.Detail = fmt.Sprintf("each run in flight is a host user of its own from CODE_EXEC_PROCESS_UID_RANGE=%s (%d at once, further runs wait for one; servers share the range through locks in "+uidLockDir+"): runs cannot signal each other, per-user kernel limits (processes, inotify, ...) are not shared, and what a run leaves running is swept by its user", rng, rng.Size())
	}
	return p, nil
}

// setUpCgroups makes the parent of the runs' cgroups and checks that a run
// can join one, and says so for sandbox_info.
func (r *Runner) setUpCgroups(ctx context.Context, disabled []Feature) sandbox.Protection {
	p := sandbox.Protection{Name: protectionName(FeatureCgroup)}
	without := ": the memory limit binds each process (RLIMIT_DATA) but not the run as a whole: shared memory, memfds, tmpfs pages and several processes can together go past it; OOM kills cannot be reported"
	switch runtime.GOOS {
	case "darwin":
		without = ": nothing bounds a run's memory (macOS does not enforce memory rlimits)"
	case "windows":
		without = ": the run's Job Object bounds the memory of its processes together instead; running out of it is not reported as oom_killed"
	}
	if slices.Contains(disabled, FeatureCgroup) {
		p.Detail = "turned off by CODE_EXEC_PROCESS_DISABLE" + without
		return p
	}
	m, err := newCgroupManager()
	if err != nil {
		p.Detail = "unavailable on this host (" + err.Error() + ")" + without
		return p
	}
	r.cgroups = m
	if err := r.tryIsolation(ctx, r.iso); err != nil {
		r.closeCgroups()
		p.Detail = "unavailable on this host (a run cannot join its cgroup: " + err.Error() + ")" + without
		return p
	}
	p.Active = true
	p.Detail = featureDetail[FeatureCgroup] + " (" + m.describe() + ")"
	return p
}

// closeCgroups removes the parent of the runs' cgroups.
func (r *Runner) closeCgroups() {
	if r.cgroups != nil {
		r.cgroups.close()
		r.cgroups = nil
	}
}
