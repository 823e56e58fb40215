package packages_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
	// gate, if not nil, holds each install until it is closed.
	gate chan struct{}
	err  error
}

func (f *fakeInstaller) Install(ctx context.Context, lang string, specs []string, dir string) error {
	f.calls.Add(1)
	if f.gate != nil {
		<-f.gate
	}
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

// TestConcurrentCallsInstallOnce: five calls for the same list, all there
// while the first install runs (synctest.Wait: each is blocked, four on the
// install in flight), make one install.
func TestConcurrentCallsInstallOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inst := &fakeInstaller{size: 10, gate: make(chan struct{})}
		r, _ := layer(t, inst, 1<<20)
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				if _, err := r.Run(context.Background(), sandbox.Request{Language: "python", Code: "x", Packages: []string{"a"}}); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait()
		close(inst.gate)
		wg.Wait()
		if n := inst.calls.Load(); n != 1 {
			t.Errorf("%d installs, want 1", n)
		}
	})
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
	synctest.Test(t, func(t *testing.T) {
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
		synctest.Wait() // the second caller waits for the first's install
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
	})
}

// TestParseAgreesWithTheInstallers asks pip and npm themselves how they read
// every spec that Parse accepts, among the documented examples, the
// malicious ones and combinations of names and versions: each must be a
// name from the index (pip: no link, no URL, no marker; npm-package-arg: a
// version, range or tag), never a path, archive, URL, git link or alias.
func TestParseAgreesWithTheInstallers(t *testing.T) {
	t.Parallel()
	packagestest.RequireInstallers(t)
	corpus := map[string][]string{
		"python":     append(packagestest.Malicious("python"), "requests==2.31.0", "Django>=4,<5", "zope.interface", "My_Pkg~=1.4", "pkg[Extra,other]==1.*"),
		"javascript": append(packagestest.Malicious("javascript"), "left-pad", "@scope/name@^1.2.0", "lodash@4.17.21", "x@latest", "y@>=1.0.0"),
	}
	for _, name := range []string{"x", "x.y", "x_y", "X-Y", "x.whl", "x.tar"} {
		for _, extra := range []string{"", "[a]"} {
			for _, v := range []string{"", "==1.0", "==1.0.zip", ">=1,<2", "===1.whl", "~=1.4", "==1.*", "==1.tar.gz", "==1.0.TGZ", "!=1.tbz"} {
				corpus["python"] = append(corpus["python"], name+extra+v)
			}
		}
	}
	for _, name := range []string{"x", "@s/x", "x.js", "x_y", "x~y", "x.tgz", "x.tar", "x.tar.gz", "@s/x.tar"} {
		for _, v := range []string{"", "@1.0.0", "@^1", "@.", "@..", "@.5", "@1.0.tgz", "@latest", "@v1", "@=1", "@*", "@x", "@1.x",
			"@next.tar", "@>=1", "@~1", "@~", "@-1", "@_x", "@+1", "@1.0.0-beta.1", "@1.0.0+build.tgz", "@1.TAR.GZ", "@.x"} {
			corpus["javascript"] = append(corpus["javascript"], name+v)
		}
	}
	checkers := map[string]*exec.Cmd{
		// pip's own parser of a command-line requirement.
		"python": exec.Command("/usr/bin/python3", "-c", `import json, sys, logging
logging.disable(logging.CRITICAL)
from pip._internal.req.constructors import install_req_from_line
out = {}
for s in json.load(sys.stdin):
    try:
        r = install_req_from_line(s)
        ok = r.link is None and r.req is not None and r.req.url is None and r.markers is None and not r.editable
        out[s] = "index" if ok else "link %s" % r.link
    except Exception as e:
        out[s] = "error: %s" % e
json.dump(out, sys.stdout)`),
		// npm-package-arg, the parser npm install uses, from npm's own folder.
		"javascript": exec.Command("node", "-e", `const fs = require("fs"), path = require("path"), cp = require("child_process");
let npa;
try {
  const cli = fs.realpathSync(cp.execSync("command -v npm", {shell: "/bin/sh"}).toString().trim());
  npa = require(require.resolve("npm-package-arg", {paths: [path.dirname(path.dirname(cli))]}));
} catch (e) { npa = require("npm-package-arg"); }
const out = {};
for (const s of JSON.parse(fs.readFileSync(0, "utf8"))) {
  try { const r = npa(s, "/nonexistent"); out[s] = ["version", "range", "tag"].includes(r.type) ? "index" : r.type; }
  catch (e) { out[s] = "error: " + e.code; }
}
process.stdout.write(JSON.stringify(out));`),
	}
	for lang, cmd := range checkers {
		var accepted []string
		for _, s := range corpus[lang] {
			if _, err := packages.Parse(lang, []string{s}); err == nil {
				accepted = append(accepted, s)
			}
		}
		in, _ := json.Marshal(accepted)
		cmd.Stdin = bytes.NewReader(in)
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir()}
		cmd.Dir = t.TempDir()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: asking the installer's parser: %v: %s", lang, err, stderr.String())
		}
		var read map[string]string
		if err := json.Unmarshal(out, &read); err != nil {
			t.Fatalf("%s: %v: %q", lang, err, out)
		}
		for _, s := range accepted {
			if read[s] != "index" {
				t.Errorf("Parse(%s) accepts %q, which the installer reads as %q, not a name from the index", lang, s, read[s])
			}
		}
		t.Logf("%s: %d of %d specs accepted, each read as a name from the index", lang, len(accepted), len(corpus[lang]))
	}
}
