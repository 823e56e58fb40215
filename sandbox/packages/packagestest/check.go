package packagestest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/packages"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// Demo packages: what Check installs.
var (
	// Python: codeexec-demo 1.0 (import codeexec_demo; VALUE is 42) and
	// codeexec-extra 2.0.
	Python = []Package{
		{Name: "codeexec-demo", Version: "1.0", Files: map[string]string{"__init__.py": "VALUE = 42\n"}},
		{Name: "codeexec-extra", Version: "2.0", Files: map[string]string{"__init__.py": "NAME = 'extra'\n"}},
		{Name: "codeexec-slow", Version: "1.0", Stall: true},
		Hooks,
	}
	// Hooks: codeexec-hooks 1.0 (import codeexec_hooks; VALUE is 7), whose
	// wheel also holds every file that python could run before the program
	// if the packages were on its path as it starts or came before the
	// standard library (see HookFiles).
	Hooks = Package{Name: "codeexec-hooks", Version: "1.0", Files: map[string]string{"__init__.py": "VALUE = 7\n"}, TopLevel: HookFiles("package")}
	// JavaScript: codeexec-demo 1.0.0 (value is 42) and codeexec-extra 2.0.0.
	JavaScript = []Package{
		{Name: "codeexec-demo", Version: "1.0.0", Files: map[string]string{"index.js": "module.exports = { value: 42 };\n"}},
		{Name: "codeexec-extra", Version: "2.0.0", Files: map[string]string{"index.js": "module.exports = { name: 'extra' };\n"}},
		{Name: "codeexec-slow", Version: "1.0.0", Stall: true},
	}
)

// Setup is what Check needs of a mode.
type Setup struct {
	// Run is the mode's runner with the usual network policy (none).
	Run sandbox.Runner
	// Install is the mode's runner whose egress proxy holds
	// packages.IndexPolicy for Index.
	Install sandbox.Runner
	Index   *Index
	// CacheDir is an empty folder that the sandbox's users can search.
	CacheDir string
	// IndexHost is the address at which a program in Run would find the
	// index if nothing stopped it (the host's address as the sandbox sees it).
	IndexHost string
	// Settle, if not nil, waits until Run is as ready for a run of lang
	// as it is between an agent's calls (docker: a warm container), before
	// the cached call.
	Settle func(t *testing.T, lang string)
}

// Layer is the packages layer of s with a fresh cache.
func (s Setup) Layer(t testing.TB) *packages.Runner { return s.layerWith(t, InstallLimits) }

func (s Setup) layerWith(t testing.TB, lim sandbox.Limits) *packages.Runner {
	t.Helper()
	cache, err := packages.OpenCache(s.CacheDir, 256<<20, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	return packages.Wrap(s.Run, packages.Config{
		Cache: cache,
		Installer: &packages.RunnerInstaller{Runner: s.Install, Index: packages.Index{PipURL: s.Index.PipURL, NpmURL: s.Index.NpmURL},
			Limits: lim},
		InstallTimeout: lim.Timeout,
	})
}

// InstallLimits are the limits of the tests' install phase.
var InstallLimits = sandbox.Limits{Timeout: 120 * time.Second, MemoryBytes: 1 << 30, CPUs: 1, Processes: 128, OpenFiles: 1024, FileSizeBytes: 256 << 20, OutputBytes: 1 << 20}

// RunLimits are the limits of the tests' runs.
var RunLimits = sandbox.Limits{Timeout: 30 * time.Second, MemoryBytes: 512 << 20, CPUs: 1, Processes: 64, OpenFiles: 256, FileSizeBytes: 16 << 20, OutputBytes: 1 << 20}

// Check is the packages suite every mode passes: packages install and
// import; the second call with the same list is served by the cache (the
// report says so, nothing is downloaded again); the run cannot reach the
// index; the installed folder is read-only to the run; malicious specs are refused before anything runs;
// a failing install says why; concurrent calls install once.
func Check(t *testing.T, s Setup) {
	ps := &packagesSuite{Setup: s, layer: s.Layer(t)}
	for _, c := range packagesLanguages {
		t.Run(c.lang, func(t *testing.T) {
			for _, pc := range packagesCases {
				t.Run(pc.name, func(t *testing.T) { pc.test(t, ps, c) })
			}
		})
	}
	st := ps.layer.Info().Cache
	if st.Entries != 4 || st.Bytes == 0 || st.InUse != 0 {
		t.Errorf("cache after the suite: %+v, want 4 entries, none in use", st)
	}
}

// packagesSuite is the mode under test and the packages layer the suite
// runs through.
type packagesSuite struct {
	Setup
	layer *packages.Runner
}

// run runs code of lang with the packages pkgs through the layer.
func (ps *packagesSuite) run(t *testing.T, lang, code string, pkgs ...string) (*sandbox.Result, error) {
	t.Helper()
	return ps.layer.Run(context.Background(), sandbox.Request{Language: lang, Code: code, Packages: pkgs, Limits: RunLimits})
}

// packagesLanguage is a language the suite installs packages of: a program
// that prints the demo package's value, the demo package's spec and an
// extra package's.
type packagesLanguage struct {
	lang, code, spec, extra string
}

// packagesLanguages are the languages of the suite; each case runs for
// each of them, as a subtest named after the language.
var packagesLanguages = []packagesLanguage{
	{"python", "import codeexec_demo\nprint(codeexec_demo.VALUE)\n", "codeexec-demo==1.0", "codeexec-extra==2.0"},
	{"javascript", "console.log(require('codeexec-demo').value)\n", "codeexec-demo@1.0.0", "codeexec-extra@2.0.0"},
}

// packagesCase is one case of the packages suite: the name of its subtest
// (go test -run selects it) and its test, for one language.
type packagesCase struct {
	name string
	test func(t *testing.T, ps *packagesSuite, c packagesLanguage)
}

// packagesCases are the suite's cases, in the order they run.
var packagesCases = []packagesCase{
	{name: "installs, imports, then comes from the cache", test: packagesInstallsImportsThenComesFromTheCache},
	{name: "the run cannot reach the index", test: packagesTheRunCannotReachTheIndex},
	{name: "the packages are read-only to the run", test: packagesThePackagesAreReadOnlyToTheRun},
	{name: "malicious specs are refused before anything runs", test: packagesMaliciousSpecsAreRefusedBeforeAnythingRuns},
	{name: "a failing install says why", test: packagesAFailingInstallSaysWhy},
	{name: "an install that runs out of time is stopped and leaves nothing", test: packagesAnInstallThatRunsOutOfTimeIsStoppedAndLeavesNothing},
	{name: "concurrent calls install once", test: packagesConcurrentCallsInstallOnce},
}

// packagesInstallsImportsThenComesFromTheCache is the case "installs, imports, then comes from the cache".
func packagesInstallsImportsThenComesFromTheCache(t *testing.T, ps *packagesSuite, c packagesLanguage) {
	settle := func() {
		if ps.Settle != nil {
			ps.Settle(t, c.lang)
		}
	}
	settle()
	res, err := ps.run(t, c.lang, c.code, c.spec)
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	if strings.TrimSpace(res.Stdout) != "42" || res.ExitCode != 0 {
		t.Fatalf("first run: exit %d, stdout %q, stderr %q; want 42", res.ExitCode, res.Stdout, res.Stderr)
	}
	if p := res.Packages; p == nil || p.Cached || p.InstallMS <= 0 || len(p.List) != 1 || p.List[0] != c.spec {
		t.Errorf("first run's packages report: %+v", p)
	}
	downloads := ps.Index.Downloads.Load()
	// How much faster a cached run is, is the benchmark's to
	// measure (docs/performance.md); here it must be a cache hit.
	settle()
	res, err = ps.run(t, c.lang, c.code, c.spec)
	if err != nil || strings.TrimSpace(res.Stdout) != "42" {
		t.Fatalf("the cached run: %v, %+v", err, res)
	}
	if p := res.Packages; p == nil || !p.Cached || p.InstallMS != 0 || len(p.List) != 1 || p.List[0] != c.spec {
		t.Errorf("second run's packages report: %+v, want %s from the cache", p, c.spec)
	}
	if n := ps.Index.Downloads.Load(); n != downloads {
		t.Errorf("the second run downloaded %d packages again: it should come from the cache", n-downloads)
	}
}

// packagesTheRunCannotReachTheIndex is the case "the run cannot reach the index".
func packagesTheRunCannotReachTheIndex(t *testing.T, ps *packagesSuite, c packagesLanguage) {
	code := reachIndex(c.lang, ps.IndexHost, ps.Index.Addr)
	before := ps.Index.Requests.Load()
	res, err := ps.run(t, c.lang, code, c.spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, "BLOCKED") || strings.Contains(res.Stdout, "REACHED") {
		t.Fatalf("the run reached the index (or the check did not run): stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
	t.Logf("the run's attempts:\n%s", res.Stdout)
	if n := ps.Index.Requests.Load(); n != before {
		t.Fatalf("the index served %d requests during the run", n-before)
	}
}

// packagesThePackagesAreReadOnlyToTheRun is the case "the packages are read-only to the run".
func packagesThePackagesAreReadOnlyToTheRun(t *testing.T, ps *packagesSuite, c packagesLanguage) {
	code := map[string]string{
		"python":     "import os\ntry:\n    open(os.environ['CODEEXEC_PACKAGES'] + '/x', 'w')\n    print('WROTE')\nexcept OSError as e:\n    print('REFUSED', e)\n",
		"javascript": "try { require('fs').writeFileSync(process.env.CODEEXEC_PACKAGES + '/x', 'x'); console.log('WROTE') } catch (e) { console.log('REFUSED', e.code) }\n",
	}[c.lang]
	res, err := ps.run(t, c.lang, code, c.spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, "REFUSED") {
		t.Fatalf("the run could write into its packages: stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
}

// packagesMaliciousSpecsAreRefusedBeforeAnythingRuns is the case "malicious specs are refused before anything runs".
func packagesMaliciousSpecsAreRefusedBeforeAnythingRuns(t *testing.T, ps *packagesSuite, c packagesLanguage) {
	before := ps.Index.Requests.Load()
	for _, bad := range Malicious(c.lang) {
		_, err := ps.run(t, c.lang, c.code, bad)
		var se *packages.SpecError
		if !errors.As(err, &se) || !errors.Is(err, packages.ErrInvalidSpec) {
			t.Errorf("spec %q: %v, want a SpecError", bad, err)
		} else if !strings.Contains(err.Error(), "refused") {
			t.Errorf("spec %q: %v does not say it was refused", bad, err)
		}
	}
	if n := ps.Index.Requests.Load(); n != before {
		t.Errorf("the index served %d requests for refused specs", n-before)
	}
}

// packagesAFailingInstallSaysWhy is the case "a failing install says why".
func packagesAFailingInstallSaysWhy(t *testing.T, ps *packagesSuite, c packagesLanguage) {
	missing := map[string]string{"python": "codeexec-demo==9.9", "javascript": "codeexec-demo@9.9.9"}[c.lang]
	_, err := ps.run(t, c.lang, c.code, missing)
	var ie *packages.InstallError
	if !errors.As(err, &ie) || !errors.Is(err, packages.ErrInstall) {
		t.Fatalf("install of %s: %v, want an InstallError", missing, err)
	}
	t.Logf("install of %s: %v", missing, err)
	if !strings.Contains(ie.Output, "9.9") {
		t.Errorf("the install error does not name the version: %v", err)
	}
}

// packagesAnInstallThatRunsOutOfTimeIsStoppedAndLeavesNothing is the case "an install that runs out of time is stopped and leaves nothing".
func packagesAnInstallThatRunsOutOfTimeIsStoppedAndLeavesNothing(t *testing.T, ps *packagesSuite, c packagesLanguage) {
	lim := InstallLimits
	lim.Timeout = 4 * time.Second
	short := ps.Setup
	short.CacheDir = filepath.Join(filepath.Dir(ps.CacheDir), filepath.Base(ps.CacheDir)+"-timeout-"+c.lang)
	layer := short.layerWith(t, lim)
	slow := map[string]string{"python": "codeexec-slow==1.0", "javascript": "codeexec-slow@1.0.0"}[c.lang]
	_, err := layer.Run(context.Background(), sandbox.Request{Language: c.lang, Code: c.code, Packages: []string{slow}, Limits: RunLimits})
	var ie *packages.InstallError
	if !errors.As(err, &ie) || !strings.Contains(ie.Reason, "timed out") {
		t.Fatalf("a stalled install: %v, want an InstallError that says it timed out", err)
	}
	left, _ := os.ReadDir(short.CacheDir)
	if st := layer.Info().Cache; st.Entries != 0 || len(left) != 0 {
		t.Errorf("after a timed-out install: cache %+v, folder holds %d entries", st, len(left))
	}
}

// packagesConcurrentCallsInstallOnce is the case "concurrent calls install once".
func packagesConcurrentCallsInstallOnce(t *testing.T, ps *packagesSuite, c packagesLanguage) {
	before := ps.Index.Downloads.Load()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := ps.run(t, c.lang, c.code, c.spec, c.extra)
			if err == nil && strings.TrimSpace(res.Stdout) != "42" {
				err = errors.New("stdout " + res.Stdout + " stderr " + res.Stderr)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := ps.Index.Downloads.Load() - before; n != 2 {
		t.Errorf("three concurrent calls downloaded %d packages, want 2 (one install of the two)", n)
	}
}

// Malicious lists specs of lang that must be refused.
func Malicious(lang string) []string {
	common := []string{"--index-url=http://evil.example/simple", "-e", "--extra-index-url", "https://evil.example/x.tar.gz",
		"git+https://evil.example/x.git", "../../etc", "/etc/passwd", "file:/etc", "a b", "x\n--index-url", "x\t", "",
		".", "..", "./x", "~/x", "~", "http://evil.example/x", "link:../x", "x.tgz", "x.tar", "x.tar.gz"}
	if lang == "python" {
		return append(common, "pkg @ https://evil.example/pkg.whl", "pkg@https://evil.example/pkg.whl", "pkg @ file:///etc/x",
			"pkg/../x", "pkg;os_name=='posix'", "-r/etc/requirements.txt", "-e.", "--editable=.", "--", "-c/etc/c.txt",
			"pkg==1.0.zip", "pkg==1.0.tar.GZ", "pkg[x]==1.tgz", "pkg===1.0.whl", "x.whl", "x.zip", "x.tbz", "x.tar.xz", "x.txz", "x.tlz", "x.tar.lz", "x.tar.lzma", "x.tar.bz2")
	}
	return append(common, "user/repo", "github:user/repo", "gitlab:u/r", "bitbucket:u/r", "gist:abc", "x@github:u/r", "x@user/repo",
		"x@npm:evil", "npm:x@1", "./local", "@scope/../x", "X@1", "x@.", "x@..", "x@./y", "x@../y", "x@~/y", "x@/etc",
		"x@.5", "x@file:../y", "x@link:../y", "x@workspace:*", "x@git+ssh://h/r.git", "x@https://evil.example/x.tgz",
		"x@1.0.tgz", "x@next.TAR", "x@1.0.0.tar.gz", "x.TGZ", "@s/x.tgz", "x@C:y", "git@evil.example:u/r.git")
}

// reachIndex is a program of lang that tries to connect to the index at
// host (the host's address seen from the sandbox) and at addr (as the
// host sees it), and through any proxy the environment names, printing
// BLOCKED when nothing answered and REACHED otherwise.
func reachIndex(lang, host, addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		port = addr[i+1:]
	}
	switch lang {
	case "python":
		return `import socket, os, urllib.request
reached = False
for h in ["` + host + `", "` + addr[:strings.LastIndex(addr, ":")] + `"]:
    try:
        socket.create_connection((h, ` + port + `), timeout=2).close()
        reached = True
    except OSError as e:
        print("connect", h, e)
try:
    urllib.request.urlopen("http://` + host + `:` + port + `/simple/", timeout=3)
    reached = True
except Exception as e:
    print("http", e)
print("REACHED" if reached else "BLOCKED")
`
	}
	return `const net = require("net"), http = require("http");
const hosts = ["` + host + `", "` + addr[:strings.LastIndex(addr, ":")] + `"];
let reached = false, left = hosts.length + 1;
const done = () => { if (--left === 0) console.log(reached ? "REACHED" : "BLOCKED"); };
for (const h of hosts) {
  const s = net.connect({ host: h, port: ` + port + ` }, () => { reached = true; s.destroy(); done(); });
  s.setTimeout(2000, () => { s.destroy(); console.log("timeout", h); done(); });
  s.on("error", (e) => { console.log("connect", h, e.code); done(); });
}
const proxy = process.env.HTTP_PROXY;
if (proxy) {
  const u = new URL(proxy);
  const r = http.get({ host: u.hostname, port: u.port, path: "http://` + host + `:` + port + `/npm/codeexec-demo" }, (res) => { if (res.statusCode === 200) reached = true; res.resume(); done(); });
  r.on("error", (e) => { console.log("proxy", e.code); done(); });
} else { done(); }
`
}

// CheckSessions checks that a session created with packages imports them
// in every call, read-only, and that the cache entry stays in use until the
// session closes. backend is the mode's session backend.
func CheckSessions(t *testing.T, s Setup, backend sessions.Backend) {
	layer := s.Layer(t)
	ctx := context.Background()
	b := layer.Sessions(backend)
	sess, err := b.Start(ctx, sessions.Spec{ID: "ses_test", Language: "python", Limits: RunLimits, Deadline: time.Now().Add(time.Minute), Packages: []string{"codeexec-demo==1.0"}})
	if err != nil {
		t.Fatalf("starting a session with packages: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = sess.Close()
		}
	}()
	for i, code := range []string{"import codeexec_demo\nx = codeexec_demo.VALUE\nprint(x)\n", "print(x + 1)\nimport codeexec_extra\n"} {
		res, err := sess.Exec(ctx, sandbox.Request{Language: "python", Code: code, Limits: RunLimits})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		want := []string{"42", "43"}[i]
		if !strings.HasPrefix(strings.TrimSpace(res.Stdout), want) {
			t.Fatalf("call %d: stdout %q, stderr %q, want %s", i, res.Stdout, res.Stderr, want)
		}
		if i == 1 && !strings.Contains(res.Stderr, "codeexec_extra") {
			t.Errorf("a package the session did not ask for was importable: stderr %q", res.Stderr)
		}
	}
	if st := layer.Info().Cache; st.InUse != 1 {
		t.Errorf("while the session lives: %+v, want its entry in use", st)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if st := layer.Info().Cache; st.InUse != 0 || st.Entries != 1 {
		t.Errorf("after the session closed: %+v, want one entry, none in use", st)
	}
}

// hookModules are the modules that python would run before a program if a
// folder of the run came first on its path: the start-up hooks that site
// imports by themselves, and standard modules that codeexec's bootstraps,
// the session driver and the restricted-Python policy import.
var hookModules = []string{"sitecustomize", "usercustomize", "traceback", "ast", "base64", "linecache", "string", "json/__init__", "types", "enum"}

// HookFiles are python files that say, when they run, that they ran
// ("HOOK-RAN <where> <name>" on stderr, and "<where> <name>" in
// builtins.CODEEXEC_HOOKS), for a package's top level or a run's files
// (where says which): the modules of hookModules, and a .pth file that
// imports one more. sitecustomize also replaces builtins.compile, as a
// package did in an attack, so that every program compiled after it
// prints HIJACKED instead.
func HookFiles(where string) map[string]string {
	files := map[string]string{}
	for _, m := range append(slices.Clone(hookModules), "codeexec_hooks_pth") {
		code := "import builtins as _b, os as _o\n_o.write(2, b'HOOK-RAN " + where + " " + m + "\\n')\n" +
			"_b.CODEEXEC_HOOKS = getattr(_b, 'CODEEXEC_HOOKS', []) + ['" + where + " " + m + "']\n"
		if m == "sitecustomize" {
			code += "_c = _b.compile\n_b.compile = lambda s, *a, **k: _c(\"print('HIJACKED')\", *a, **k)\n"
		}
		files[m+".py"] = code
	}
	files["codeexec-hooks.pth"] = "import codeexec_hooks_pth\n"
	return files
}

// hookProgram imports the standard modules that HookFiles imitate and the
// hooks package, and prints "hello 7 []" when nothing of HookFiles ran.
const hookProgram = "import builtins, json, string, traceback, ast, base64, linecache, types, enum\nimport codeexec_hooks\n" +
	"print('hello', codeexec_hooks.VALUE, sorted(getattr(builtins, 'CODEEXEC_HOOKS', [])))\n"

// CheckNothingRunsFirst checks that no file of a python package, and no
// file of the run, runs before the program does, in a run or in a session
// (backend is the mode's session backend; nil skips sessions): neither as
// a start-up hook (sitecustomize, usercustomize, a .pth file) nor as a
// module standing in for a standard one; the package itself is importable.
func CheckNothingRunsFirst(t *testing.T, s Setup, backend sessions.Backend) {
	layer := s.Layer(t)
	ctx := context.Background()
	spec := Hooks.Name + "==" + Hooks.Version
	check := func(t *testing.T, res *sandbox.Result, err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 || res.Stdout != want || strings.Contains(res.Stderr, "HOOK-RAN") {
			t.Fatalf("something ran before the program: exit %d, stdout %q (want %q), stderr %q", res.ExitCode, res.Stdout, want, res.Stderr)
		}
	}
	t.Run("run", func(t *testing.T) {
		var files []artifacts.Input
		for name, code := range HookFiles("file") {
			files = append(files, artifacts.Input{Path: name, Data: []byte(code)})
		}
		res, err := layer.Run(ctx, sandbox.Request{Language: "python", Code: hookProgram, Packages: []string{spec}, Files: files, Limits: RunLimits})
		check(t, res, err, "hello 7 []\n")
	})
	if backend == nil {
		return
	}
	t.Run("session", func(t *testing.T) {
		sess, err := layer.Sessions(backend).Start(ctx, sessions.Spec{ID: "ses_hooks", Language: "python", Limits: RunLimits, Deadline: time.Now().Add(time.Minute), Packages: []string{spec}})
		if err != nil {
			t.Fatalf("starting a session with packages: %v", err)
		}
		defer func() { _ = sess.Close() }()
		res, err := sess.Exec(ctx, sandbox.Request{Language: "python", Code: "print('hello world')", Limits: RunLimits})
		check(t, res, err, "hello world\n")
		res, err = sess.Exec(ctx, sandbox.Request{Language: "python", Code: hookProgram, Limits: RunLimits})
		check(t, res, err, "hello 7 []\n")
	})
}
