package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// UIDRange is a range of host user ids, First to Last inclusive, that
// process mode runs code as when the server is root: each concurrent run
// takes one of its own (CODE_EXEC_PROCESS_UID_RANGE, which configs parses).
type UIDRange struct {
	First, Last int
}

// DefaultUIDRange is the range used when none is configured: 64 ids well
// above the ids of accounts and of the usual subordinate ranges' start.
var DefaultUIDRange = UIDRange{First: 200000, Last: 200063}

// nobodyUID is the overflow user; a range must never include it, since many
// other things run as nobody.
const nobodyUID = 65534

// Validate checks that the range is usable: ids from 1 to 4294967294, first
// not above last, and neither root (0) nor nobody (65534) in it.
func (r UIDRange) Validate() error {
	switch {
	case r.First < 1 || r.Last > 1<<32-2:
		return errors.New("uids must be between 1 and 4294967294")
	case r.First > r.Last:
		return fmt.Errorf("the first uid %d is above the last %d", r.First, r.Last)
	case r.First <= nobodyUID && nobodyUID <= r.Last:
		return fmt.Errorf("the range %s includes 65534 (nobody), which other programs run as", r)
	}
	return nil
}

// Size is the number of ids in the range.
func (r UIDRange) Size() int { return r.Last - r.First + 1 }

func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// uidPool hands out the ids of a range, one per run in flight, to every
// codeexec server on this host: a run holds an exclusive lock (flock) on a
// file named after its id in lockDir for as long as it lasts, so two servers
// with overlapping ranges never share an id, and the kernel releases the lock
// of a server that dies. Whatever runs as an id whose lock nobody holds is a
// leftover (of a server that died, or of a run whose supervisor died) and is
// swept when the id is taken.
type uidPool struct {
	rng     UIDRange
	lockDir string
	mu      sync.Mutex
	next    int
}

// uidLockDir is where the locks live: root's own directory, never a
// world-writable one.
const uidLockDir = "/run/codeexec/uids"

func newUIDPool(r UIDRange, lockDir string) (*uidPool, error) {
	if err := makeLockDir(lockDir); err != nil {
		return nil, err
	}
	return &uidPool{rng: r, lockDir: lockDir}, nil
}

// makeLockDir makes lockDir if it is missing, and checks that only its
// owner can write it.
func makeLockDir(lockDir string) error {
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return err
	}
	st, err := os.Lstat(lockDir)
	if err != nil {
		return err
	}
	if !st.IsDir() || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is not a directory that only its owner can write", lockDir)
	}
	return nil
}

// openUIDLock opens (making it if needed) the lock file of uid in lockDir.
func openUIDLock(lockDir string, uid int) (*os.File, error) {
	return os.OpenFile(filepath.Join(lockDir, strconv.Itoa(uid)), os.O_CREATE|os.O_RDWR|oNoFollow, 0o600)
}

// uidLease is one id taken from the pool.
type uidLease struct {
	uid  int
	lock *os.File
}

// acquire takes a free id, waiting for one while every id is in use, and
// kills whatever still runs as it.
func (p *uidPool) acquire(ctx context.Context) (*uidLease, error) {
	for {
		if l := p.tryAcquire(); l != nil {
			sweepUser(l.uid)
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a free run user: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tryAcquire takes the first free id after the last one handed out, or
// returns nil.
func (p *uidPool) tryAcquire() *uidLease {
	p.mu.Lock()
	start := p.next
	p.next = (p.next + 1) % p.rng.Size()
	p.mu.Unlock()
	for i := range p.rng.Size() {
		uid := p.rng.First + (start+i)%p.rng.Size()
		f, err := openUIDLock(p.lockDir, uid)
		if err != nil {
			continue
		}
		if executor.TryLock(f) != nil {
			f.Close()
			continue
		}
		return &uidLease{uid: uid, lock: f}
	}
	return nil
}

// release gives the id back; the caller has made sure nothing of its run is
// left (or lets the next taker sweep it).
func (l *uidLease) release() { l.lock.Close() }

// shareUID is for a server whose runs all run as one host user of the
// range (uid-range turned off): it holds a shared lock on uid's file in
// lockDir for as long as the returned file is open, so that a server of
// the whole range (which takes each id with an exclusive lock) never hands
// that id to one of its runs, nor sweeps the processes of this server's
// runs as a leftover of it. Servers that share the id hold the lock
// together. It waits while a run of such a server holds the id.
func shareUID(ctx context.Context, uid int, lockDir string) (*os.File, error) {
	if err := makeLockDir(lockDir); err != nil {
		return nil, err
	}
	f, err := openUIDLock(lockDir, uid)
	if err != nil {
		return nil, err
	}
	for {
		err := executor.TryLockShared(f)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, executor.ErrLocked) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the run user %d, which a run of another server holds: %w", uid, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
