package principals

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Registry holds the principals in force and tells which one a request is.
// It is safe for concurrent use.
type Registry struct {
	// anonymous, when set, is the principal of every request, token or
	// not (stdio, and HTTP without tokens); the registry then has no
	// tokens.
	anonymous *Principal
	// credential names what an HTTP client must send, in the 401 answer.
	credential string

	// The file's, when the principals come from one.
	path     string
	defaults Defaults
	log      *slog.Logger
	// onReload, if set, sees every set of principals put in force (at
	// load and at each reload).
	onReload func([]*Principal)

	cur atomic.Pointer[[]*Principal]

	// mu serializes reloads; loaded is what the file held when it was
	// last read (its bytes' hash and its stat), for Watch.
	mu       sync.Mutex
	loaded   [32]byte
	loadStat os.FileInfo
}

// Anonymous returns the registry of a server whose clients send no token:
// every request is p.
func Anonymous(p *Principal) *Registry {
	r := &Registry{anonymous: p}
	r.cur.Store(&[]*Principal{p})
	return r
}

// Token returns the registry of a server with one bearer token (setting
// names it, for the 401 answer): a request with it is p, one without it
// none.
func Token(p *Principal, token, setting string) *Registry {
	p.token = sha256.Sum256([]byte(token))
	r := &Registry{credential: setting}
	r.cur.Store(&[]*Principal{p})
	return r
}

// FileConfig configures Load.
type FileConfig struct {
	// Path is the principals file (CODE_EXEC_PRINCIPALS_FILE).
	Path string
	// Defaults are the server-wide settings and caps.
	Defaults Defaults
	// Logger receives the reloads; nil discards.
	Logger *slog.Logger
	// OnReload, if set, sees every set of principals put in force, the
	// first one included; it must not block.
	OnReload func([]*Principal)
}

// Load reads the principals file and returns the registry of its
// principals, or the error that names what is wrong (the server then
// refuses to start).
func Load(cfg FileConfig) (*Registry, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{path: cfg.Path, defaults: cfg.Defaults, log: log, onReload: cfg.OnReload,
		credential: "the token of a principal of CODE_EXEC_PRINCIPALS_FILE"}
	if _, err := r.reload(true); err != nil {
		return nil, err
	}
	return r, nil
}

// Path is the principals file ("" for a registry without one).
func (r *Registry) Path() string { return r.path }

// Credential names what an HTTP client must send as its bearer token (""
// when the clients send none).
func (r *Registry) Credential() string { return r.credential }

// List returns the principals in force.
func (r *Registry) List() []*Principal { return *r.cur.Load() }

// Authenticate returns the principal of a request whose bearer token is
// token (present: the request sent one), or false. It compares the
// token's SHA-256 with every principal's in constant time, so that how
// long it takes tells nothing of which principal, if any, is close.
func (r *Registry) Authenticate(token string, present bool) (*Principal, bool) {
	if r.anonymous != nil {
		return r.anonymous, true
	}
	if !present {
		return nil, false
	}
	sum := sha256.Sum256([]byte(token))
	var found *Principal
	for _, p := range r.List() {
		if subtle.ConstantTimeCompare(sum[:], p.token[:]) == 1 {
			found = p
		}
	}
	return found, found != nil
}

// Reload reads the file again and puts its principals in force, without
// touching the requests in flight (each holds the Principal it began with).
// A file that cannot be read or is refused leaves the principals in force
// as they are; the error says why, and is logged loudly. A registry without
// a file has nothing to reload.
func (r *Registry) Reload() error {
	if r.path == "" {
		return nil
	}
	_, err := r.reload(false)
	return err
}

// reload reads the file; unless first, only when it changed (by its
// bytes). It reports whether new principals were put in force.
func (r *Registry) reload(first bool) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, st, err := readFile(r.path)
	if err == nil && !first && sha256.Sum256(data) == r.loaded {
		r.loadStat = st
		return false, nil
	}
	var list []*Principal
	if err == nil {
		list, err = Parse(data, r.defaults)
	}
	if err != nil {
		err = fmt.Errorf("CODE_EXEC_PRINCIPALS_FILE %s: %w", r.path, err)
		if !first {
			r.log.Error("!!! the principals file was NOT reloaded; the previous principals stay in force !!!", "path", r.path, "err", err)
		}
		return false, err
	}
	r.loaded, r.loadStat = sha256.Sum256(data), st
	r.cur.Store(&list)
	names := make([]string, len(list))
	for i, p := range list {
		names[i] = p.Name
	}
	if first {
		r.log.Info("principals", "path", r.path, "count", len(list), "names", names)
	} else {
		r.log.Info("principals reloaded", "path", r.path, "count", len(list), "names", names)
	}
	for _, p := range list {
		r.log.Debug("principal", "name", p.Name, "org", p.Org, "policy", p.Describe())
	}
	if r.onReload != nil {
		r.onReload(list)
	}
	return true, nil
}

// readFile reads the principals file, at most MaxFileBytes and one more.
func readFile(path string) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	return data, st, err
}

// fileState is what Watch compares of the file between two looks.
type fileState struct {
	fi os.FileInfo // nil when the file cannot be seen
}

func stateOf(path string) fileState {
	fi, err := os.Stat(path)
	if err != nil {
		return fileState{}
	}
	return fileState{fi}
}

// same reports whether the file looks unchanged: as absent, or with the
// same inode, size and modification time.
func (a fileState) same(b fileState) bool {
	if a.fi == nil || b.fi == nil {
		return a.fi == nil && b.fi == nil
	}
	return os.SameFile(a.fi, b.fi) && a.fi.Size() == b.fi.Size() && a.fi.ModTime().Equal(b.fi.ModTime())
}

// Watch looks at the file every interval until ctx ends, and reloads it
// when it changed (its inode, size or modification time): the file is
// picked up on change, as on SIGHUP, without a restart. A file that is
// refused is said so once per change. A registry without a file returns
// at once.
func (r *Registry) Watch(ctx context.Context, interval time.Duration) {
	if r.path == "" {
		return
	}
	r.mu.Lock()
	seen := fileState{r.loadStat}
	r.mu.Unlock()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := stateOf(r.path)
		if now.same(seen) {
			continue
		}
		seen = now
		_, _ = r.reload(false)
	}
}
