package packages

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Key is the cache key of an installed list: a hash of the interpreter's
// identity (its path and version, or the image), the language and the exact
// normalized list (see Parse).
func Key(identity, lang string, specs []string) string {
	h := sha256.New()
	for _, f := range append([]string{"codeexec-packages-v1", identity, lang}, specs...) {
		fmt.Fprintf(h, "%d:%s\n", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// ErrTooLarge: an install came out larger than the cap of one install.
var ErrTooLarge = errors.New("installed packages too large")

// completeMark is the file that marks a finished entry (its mtime is the
// entry's last use, so that eviction order survives a restart).
const completeMark = ".codeexec-complete"

// Cache keeps installed package lists in folders of Dir named by their
// Key. It is safe for concurrent use.
type Cache struct {
	dir      string
	maxBytes int64
	maxEntry int64

	mu       sync.Mutex
	entries  map[string]*entry
	inflight map[string]*install
	bytes    int64
}

type entry struct {
	key      string
	size     int64
	refs     int
	lastUsed time.Time
}

type install struct {
	done chan struct{}
	err  error
}

// CacheStats is what sandbox_info says of the cache.
type CacheStats struct {
	Dir      string `json:"dir" schema:"optional"`
	Entries  int    `json:"entries"`
	Bytes    int64  `json:"bytes"`
	MaxBytes int64  `json:"max_bytes"`
	// InUse counts the entries that runs are using now.
	InUse int `json:"in_use" schema:"optional"`
}

// OpenCache opens (making it if needed) the cache in dir, a folder only
// this user may write and everyone may search but not list (runs of other
// users read entries in it), capped at maxBytes in all and maxEntry for one entry.
// Finished entries left by an earlier server are kept; unfinished ones are
// removed.
func OpenCache(dir string, maxBytes, maxEntry int64) (*Cache, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("packages cache: %q is not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("packages cache: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("packages cache: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("packages cache: %s is not a folder", dir)
	}
	if err := checkOwned(fi, dir); err != nil {
		return nil, err
	}
	// Searchable, not listable: docker mode's run containers see the
	// folder (read-only), and must not learn which lists others cached.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("packages cache: %w", err)
	}
	c := &Cache{dir: dir, maxBytes: maxBytes, maxEntry: maxEntry, entries: map[string]*entry{}, inflight: map[string]*install{}}
	list, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("packages cache: %w", err)
	}
	for _, d := range list {
		p := filepath.Join(dir, d.Name())
		mark, err := os.Stat(filepath.Join(p, completeMark))
		if !d.IsDir() || len(d.Name()) != 32 || err != nil {
			_ = removeTree(p)
			continue
		}
		size, _ := treeSize(p)
		c.entries[d.Name()] = &entry{key: d.Name(), size: size, lastUsed: mark.ModTime()}
		c.bytes += size
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

// Dir is the cache's folder.
func (c *Cache) Dir() string { return c.dir }

// Stats says how full the cache is.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := CacheStats{Dir: c.dir, Entries: len(c.entries), Bytes: c.bytes, MaxBytes: c.maxBytes}
	for _, e := range c.entries {
		if e.refs > 0 {
			s.InUse++
		}
	}
	return s
}

// Acquire returns the folder of the entry key, filling it first with fill
// (given a fresh empty folder) when it is not there: hit says whether it
// was. Callers asking for the same key at once share one fill and its
// error (except a fill stopped because its own caller went away: a waiter
// still interested then fills it itself). The entry is not evicted until release is called (once).
// Cancelling ctx stops waiting for another caller's fill, not the fill.
func (c *Cache) Acquire(ctx context.Context, key string, fill func(ctx context.Context, dir string) error) (dir string, release func(), hit bool, err error) {
	first := true
	for {
		c.mu.Lock()
		if e, ok := c.entries[key]; ok {
			e.refs++
			e.lastUsed = time.Now()
			c.mu.Unlock()
			now := time.Now()
			_ = os.Chtimes(filepath.Join(c.dir, key, completeMark), now, now)
			var once sync.Once
			return filepath.Join(c.dir, key), func() { once.Do(func() { c.release(key) }) }, first, nil
		}
		if in, ok := c.inflight[key]; ok {
			c.mu.Unlock()
			select {
			case <-in.done:
			case <-ctx.Done():
				return "", nil, false, ctx.Err()
			}
			if in.err != nil && !(errors.Is(in.err, context.Canceled) && ctx.Err() == nil) {
				return "", nil, false, in.err
			}
			// Filled, or the caller that was filling it went away: look
			// again (and fill it ourselves if it is still missing).
			continue
		}
		in := &install{done: make(chan struct{})}
		c.inflight[key] = in
		c.mu.Unlock()
		first = false
		in.err = c.fill(ctx, key, fill)
		c.mu.Lock()
		delete(c.inflight, key)
		c.mu.Unlock()
		close(in.done)
		if in.err != nil {
			return "", nil, false, in.err
		}
	}
}

// fill installs key into a staging folder and moves it into place.
func (c *Cache) fill(ctx context.Context, key string, fill func(ctx context.Context, dir string) error) error {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	staging := filepath.Join(c.dir, "tmp-"+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(staging, 0o755); err != nil {
		return fmt.Errorf("packages cache: %w", err)
	}
	defer func() { _ = removeTree(staging) }()
	if err := fill(ctx, staging); err != nil {
		return err
	}
	size, err := seal(staging)
	if err != nil {
		return fmt.Errorf("packages cache: %w", err)
	}
	if c.maxEntry > 0 && size > c.maxEntry {
		return fmt.Errorf("%w: %d bytes, over the cap of %d bytes for one install (CODE_EXEC_PACKAGES_MAX_BYTES)", ErrTooLarge, size, c.maxEntry)
	}
	if err := os.WriteFile(filepath.Join(staging, completeMark), nil, 0o644); err != nil {
		return fmt.Errorf("packages cache: %w", err)
	}
	final := filepath.Join(c.dir, key)
	_ = removeTree(final)
	if err := os.Rename(staging, final); err != nil {
		return fmt.Errorf("packages cache: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[key] = &entry{key: key, size: size, lastUsed: time.Now()}
	c.bytes += size
	c.evictLocked()
	return nil
}

func (c *Cache) release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		e.refs--
		e.lastUsed = time.Now()
	}
	c.evictLocked()
}

// evictLocked removes the least recently used entries that no run uses
// until the cache is within its cap.
func (c *Cache) evictLocked() {
	if c.maxBytes <= 0 || c.bytes <= c.maxBytes {
		return
	}
	var free []*entry
	for _, e := range c.entries {
		if e.refs == 0 {
			free = append(free, e)
		}
	}
	sort.Slice(free, func(i, j int) bool { return free[i].lastUsed.Before(free[j].lastUsed) })
	for _, e := range free {
		if c.bytes <= c.maxBytes {
			return
		}
		// Renamed first, so that a new install of the same key never
		// meets a half-removed folder.
		gone := filepath.Join(c.dir, "tmp-evicted-"+e.key)
		if err := os.Rename(filepath.Join(c.dir, e.key), gone); err == nil {
			_ = removeTree(gone)
		}
		delete(c.entries, e.key)
		c.bytes -= e.size
	}
}

// seal makes an installed tree the server's and read-only to everyone
// else (the install ran as a sandbox user), refuses anything but regular
// files, folders and symbolic links that stay inside it, and returns its size.
func seal(root string) (int64, error) {
	var size int64
	uid, gid := os.Geteuid(), os.Getegid()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		_ = os.Lchown(p, uid, gid)
		switch t := d.Type(); {
		case t.IsDir():
			return os.Chmod(p, 0o755)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			abs := target
			if !filepath.IsAbs(abs) {
				abs = filepath.Join(filepath.Dir(p), target)
			}
			if rel, err := filepath.Rel(root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				return os.Remove(p)
			}
			return nil
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			size += fi.Size()
			return os.Chmod(p, fi.Mode().Perm()&0o755|0o644)
		default:
			return os.Remove(p)
		}
	})
	return size, err
}

// treeSize adds up the sizes of the regular files under root.
func treeSize(root string) (int64, error) {
	var size int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	return size, err
}

// removeTree removes root, making folders writable first (an install can
// leave read-only folders behind).
func removeTree(root string) error {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(root)
}
