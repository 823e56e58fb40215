package packages_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/packages/packagestest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		lang string
		in   []string
		want []string
	}{
		{"python", []string{"requests==2.31.0"}, []string{"requests==2.31.0"}},
		{"python", []string{"Django>=4,<5", "zope.interface", "My_Pkg~=1.4"}, []string{"django>=4,<5", "my-pkg~=1.4", "zope-interface"}},
		{"python", []string{"pkg[Extra,other]==1.*", "pkg[Extra,other]==1.*"}, []string{"pkg[extra,other]==1.*"}},
		{"javascript", []string{"left-pad", "@scope/name@^1.2.0", "lodash@4.17.21", "x@latest", "y@>=1.0.0"}, []string{"@scope/name@^1.2.0", "left-pad", "lodash@4.17.21", "x@latest", "y@>=1.0.0"}},
	}
	for _, c := range cases {
		got, err := packages.Parse(c.lang, c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Parse(%s, %q) = %q, %v; want %q", c.lang, c.in, got, err, c.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, lang := range []string{"python", "javascript"} {
		for _, bad := range packagestest.Malicious(lang) {
			_, err := packages.Parse(lang, []string{"ok", bad})
			var se *packages.SpecError
			if !errors.As(err, &se) || se.Index != 1 || se.Spec != bad || !errors.Is(err, packages.ErrInvalidSpec) {
				t.Errorf("Parse(%s, %q) = %v, want a SpecError naming packages[1]", lang, bad, err)
			}
		}
	}
	if _, err := packages.Parse("bash", []string{"x"}); !errors.Is(err, packages.ErrInvalidSpec) {
		t.Errorf("packages for bash: %v", err)
	}
	many := make([]string, packages.MaxSpecs+1)
	for i := range many {
		many[i] = "p" + strings.Repeat("x", i)
	}
	if _, err := packages.Parse("python", many); !errors.Is(err, packages.ErrInvalidSpec) {
		t.Errorf("too many packages: %v", err)
	}
}

func TestIndexPolicyAllowsOnlyTheIndex(t *testing.T) {
	t.Parallel()
	pol, err := packages.IndexPolicy([]string{"http://127.0.0.1:8080/simple/", "https://registry.example.org/"}, nil, packages.DefaultCaps)
	if err != nil {
		t.Fatal(err)
	}
	if got := pol.Allow.Strings(); !slices.Equal(got, []string{"127.0.0.1:8080", "registry.example.org:443"}) {
		t.Errorf("allowlist %q", got)
	}
	if same, _ := packages.IndexPolicy([]string{"http://127.0.0.1:8080/simple/", "http://127.0.0.1:8080/npm/"}, nil, packages.DefaultCaps); !slices.Equal(same.Allow.Strings(), []string{"127.0.0.1:8080"}) {
		t.Errorf("one host for both indexes: %q", same.Allow.Strings())
	}
	if err := pol.Allow.Check("127.0.0.1", 8081); err == nil {
		t.Error("another port of the index host is allowed")
	}
	if err := pol.Allow.Check("example.org", 443); err == nil {
		t.Error("another host is allowed")
	}
	for _, bad := range []string{"ftp://x/", "http://user:pw@x/", "http:///simple", "http://x/?q=1", "x"} {
		if _, err := packages.IndexPolicy([]string{bad}, nil, packages.DefaultCaps); err == nil {
			t.Errorf("index URL %q accepted", bad)
		}
	}
}

// fakeInstaller writes one file of size bytes and counts its installs.
type fakeInstaller struct {
	size  int
	calls atomic.Int64
	delay time.Duration
	err   error
}

func (f *fakeInstaller) Install(ctx context.Context, lang string, specs []string, dir string) error {
	f.calls.Add(1)
	time.Sleep(f.delay)
	if f.err != nil {
		return f.err
	}
	return os.WriteFile(filepath.Join(dir, "pkg.py"), make([]byte, f.size), 0o600)
}

func layer(t *testing.T, inst packages.Installer, capBytes int64) (*packages.Runner, *sandboxtest.Fake) {
	t.Helper()
	cache, err := packages.OpenCache(filepath.Join(t.TempDir(), "cache"), capBytes, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	fake := &sandboxtest.Fake{}
	return packages.Wrap(fake, packages.Config{Cache: cache, Installer: inst, InstallTimeout: time.Minute}), fake
}

func TestRunnerCachesAndMountsReadOnly(t *testing.T) {
	t.Parallel()
	inst := &fakeInstaller{size: 10}
	r, fake := layer(t, inst, 1<<20)
	var seen []*sandbox.PackageDir
	fake.RunFunc = func(_ context.Context, req sandbox.Request) (*sandbox.Result, error) {
		seen = append(seen, req.PackageDir)
		return &sandbox.Result{}, nil
	}
	for range 2 {
		if _, err := r.Run(context.Background(), sandbox.Request{Language: "python", Code: "x", Packages: []string{"B==1", "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Run(context.Background(), sandbox.Request{Language: "python", Code: "x"}); err != nil {
		t.Fatal(err)
	}
	if n := inst.calls.Load(); n != 1 {
		t.Errorf("%d installs, want 1", n)
	}
	if len(seen) != 3 || seen[0] == nil || seen[0].Writable || *seen[0] != *seen[1] || seen[2] != nil {
		t.Fatalf("package folders given to runs: %+v", seen)
	}
	fi, err := os.Stat(filepath.Join(seen[0].HostDir, "pkg.py"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("installed file: %v, %v; want mode 0644 (sealed)", fi, err)
	}
	if st := r.Info().Cache; st.Entries != 1 || st.Bytes != 10 || st.InUse != 0 {
		t.Errorf("cache stats %+v", st)
	}
}

func TestConcurrentCallsInstallOnce(t *testing.T) {
	t.Parallel()
	inst := &fakeInstaller{size: 10, delay: 100 * time.Millisecond}
	r, _ := layer(t, inst, 1<<20)
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Run(context.Background(), sandbox.Request{Language: "python", Code: "x", Packages: []string{"a"}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := inst.calls.Load(); n != 1 {
		t.Errorf("%d installs, want 1", n)
	}
}

func TestEvictionKeepsEntriesInUse(t *testing.T) {
	t.Parallel()
	inst := &fakeInstaller{size: 400}
	r, fake := layer(t, inst, 1000)
	ctx := context.Background()
	hold, release := make(chan struct{}), make(chan struct{})
	fake.RunFunc = func(_ context.Context, req sandbox.Request) (*sandbox.Result, error) {
		if req.Code == "hold" {
			close(hold)
			<-release
		}
		return &sandbox.Result{}, nil
	}
	done := make(chan error)
	go func() {
		_, err := r.Run(ctx, sandbox.Request{Language: "python", Code: "hold", Packages: []string{"a"}})
		done <- err
	}()
	<-hold
	for _, p := range []string{"b", "c", "d"} {
		if _, err := r.Run(ctx, sandbox.Request{Language: "python", Code: "x", Packages: []string{p}}); err != nil {
			t.Fatal(err)
		}
	}
	// 4 × 400 bytes over a cap of 1000: b and c go, a (in use) and d stay.
	if st := r.Info().Cache; st.Entries != 2 || st.Bytes != 800 || st.InUse != 1 {
		t.Errorf("cache while a is in use: %+v", st)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	before := inst.calls.Load()
	if _, err := r.Run(ctx, sandbox.Request{Language: "python", Code: "x", Packages: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if inst.calls.Load() != before {
		t.Error("a was evicted while in use")
	}
}

func TestInstallErrorsAndOversizeAreReported(t *testing.T) {
	t.Parallel()
	fail := &fakeInstaller{err: &packages.InstallError{Tool: "pip", Reason: "exited with code 1", Output: "No matching distribution"}}
	r, _ := layer(t, fail, 1<<20)
	_, err := r.Run(context.Background(), sandbox.Request{Language: "python", Code: "x", Packages: []string{"a==9"}})
	if !errors.Is(err, packages.ErrInstall) || !strings.Contains(err.Error(), "No matching distribution") {
		t.Errorf("failed install: %v", err)
	}
	big := &fakeInstaller{size: 2 << 20}
	r, _ = layer(t, big, 8<<20)
	_, err = r.Run(context.Background(), sandbox.Request{Language: "python", Code: "x", Packages: []string{"a"}})
	if !errors.Is(err, packages.ErrTooLarge) {
		t.Errorf("oversize install: %v", err)
	}
	if st := r.Info().Cache; st.Entries != 0 {
		t.Errorf("a refused install was cached: %+v", st)
	}
	left, _ := filepath.Glob(filepath.Join(r.Info().Cache.Dir, "tmp-*"))
	if len(left) > 0 {
		t.Errorf("staging folders left behind: %v", left)
	}
}

func TestOpenCacheKeepsFinishedEntries(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := packages.OpenCache(dir, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	key := packages.Key("id", "python", []string{"a"})
	_, release, hit, err := c.Acquire(context.Background(), key, func(_ context.Context, d string) error {
		return os.WriteFile(filepath.Join(d, "f"), []byte("abc"), 0o644)
	})
	if err != nil || hit {
		t.Fatal(err, hit)
	}
	release()
	_ = os.Mkdir(filepath.Join(dir, "tmp-leftover"), 0o755)
	c2, err := packages.OpenCache(dir, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats(); st.Entries != 1 || st.Bytes != 3 {
		t.Errorf("reopened cache %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, "tmp-leftover")); !os.IsNotExist(err) {
		t.Errorf("an unfinished folder was kept: %v", err)
	}
	_, _, hit, err = c2.Acquire(context.Background(), key, func(context.Context, string) error { return errors.New("installed again") })
	if err != nil || !hit {
		t.Errorf("reopened cache: hit %v, %v", hit, err)
	}
}

// A caller that goes away stops its own install, and a caller waiting for
// the same list installs it itself instead of failing with the first's
// cancellation.
func TestWaiterOutlivesACancelledInstall(t *testing.T) {
	t.Parallel()
	cache, err := packages.OpenCache(filepath.Join(t.TempDir(), "cache"), 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	key := packages.Key("id", "python", []string{"a"})
	started := make(chan struct{})
	first, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, _, _, err := cache.Acquire(first, key, func(ctx context.Context, dir string) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		done <- err
	}()
	<-started
	waited := make(chan error)
	go func() {
		_, release, _, err := cache.Acquire(context.Background(), key, func(_ context.Context, dir string) error {
			return os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
		})
		if err == nil {
			release()
		}
		waited <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled caller: %v", err)
	}
	if err := <-waited; err != nil {
		t.Errorf("the waiting caller: %v, want it to install the list itself", err)
	}
	if st := cache.Stats(); st.Entries != 1 {
		t.Errorf("cache %+v", st)
	}
}
