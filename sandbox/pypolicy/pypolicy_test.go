package pypolicy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	process.MaybeRunHelper()
	os.Exit(m.Run())
}

// modes are the sandboxes the suite runs in: the policy must hold in each.
var modes = []sandbox.Mode{sandbox.ModeProcess, sandbox.ModeNone, sandbox.ModeDocker}

// newBase starts the runner of mode for the test, or skips (fails with
// CODE_EXEC_REQUIRE_DOCKER=1) when docker mode cannot run here; docker mode
// skips under -short.
func newBase(t *testing.T, mode sandbox.Mode) sandbox.Runner {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	langs := []string{"python", "bash"}
	var (
		r   sandbox.Runner
		err error
	)
	switch mode {
	case sandbox.ModeProcess:
		// As the server runs it: python's interpreter started ahead of
		// each run, with the policy's modules imported and its bootstrap
		// compiled.
		r, err = process.New(ctx, process.Config{Languages: langs, WorkRoot: workRoot(t),
			PoolSize: 1, PoolLimits: sandboxtest.DefaultLimits(), PythonPreload: pypolicy.Imports, PythonPrelude: pypolicy.Prelude()})
	case sandbox.ModeNone:
		r, err = host.New(ctx, host.Config{Languages: langs, WorkRoot: t.TempDir()})
	case sandbox.ModeDocker:
		sandboxtest.SkipShort(t, sandboxtest.NeedsDocker)
		img := os.Getenv("CODE_EXEC_DOCKER_IMAGE")
		r, err = docker.New(ctx, docker.Config{Image: img, Languages: langs, PoolSize: 2, PoolLimits: sandboxtest.DefaultLimits()})
		if err != nil {
			msg := fmt.Sprintf("docker mode cannot run here: %v", err)
			if os.Getenv("CODE_EXEC_REQUIRE_DOCKER") == "1" {
				t.Fatalf("%s (CODE_EXEC_REQUIRE_DOCKER=1)", msg)
			}
			t.Skipf("%s; set CODE_EXEC_REQUIRE_DOCKER=1 to fail instead of skipping", msg)
		}
	}
	if err != nil {
		t.Fatalf("%s runner: %v", mode, err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if st, ok := r.Capabilities().Language("python"); !ok || !st.Available {
		t.Fatalf("python is not available in %s mode: %+v", mode, st)
	}
	return sandbox.Limit(r, 3)
}

// workRoot is a temporary directory that process mode's sandbox user can
// search (t.TempDir makes private ones).
func workRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func policyFor(allow []string, nodes int) pypolicy.Policy {
	return pypolicy.Policy{AllowedImports: append(append([]string(nil), pypolicy.DefaultAllowedImports...), allow...), MaxASTNodes: nodes}
}

func run(t *testing.T, r sandbox.Runner, code, stdin string) (*sandbox.Result, error) {
	t.Helper()
	req := sandboxtest.Req("python", code)
	req.Stdin = stdin
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return r.Run(ctx, req)
}

// TestEscapes: every escape attempt is refused, in every mode, with the
// rule and the line it is about, in one sentence.
func TestEscapes(t *testing.T) {
	if len(escapes) < 40 {
		t.Fatalf("the suite has %d escape attempts; it must keep at least 40", len(escapes))
	}
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			base := newBase(t, mode)
			for _, c := range escapes {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					res, err := run(t, pypolicy.Wrap(base, policyFor(c.allow, c.nodes)), c.code, "")
					var perr *pypolicy.Error
					if !errors.As(err, &perr) || !errors.Is(err, pypolicy.ErrPolicy) {
						if res != nil {
							t.Fatalf("%s: not refused: err=%v exit=%d stdout=%q stderr=%q", c.technique, err, res.ExitCode, abbrev(res.Stdout), abbrev(res.Stderr))
						}
						t.Fatalf("%s: not refused by the policy: %v", c.technique, err)
					}
					if perr.Rule != c.rule || perr.Line != c.line {
						t.Errorf("%s: refused under rule %q at line %d, want rule %q at line %d: %v", c.technique, perr.Rule, perr.Line, c.rule, c.line, err)
					}
					msg := err.Error()
					where := fmt.Sprintf("line %d:", c.line)
					if c.line == 0 {
						where = "the program:"
					}
					if !strings.HasPrefix(msg, "The restricted Python policy refused "+where) || !strings.Contains(msg, "(rule "+c.rule+")") ||
						strings.Count(msg, "\n") != 0 || !strings.HasSuffix(msg, ".") {
						t.Errorf("the message is not one sentence naming the line and the rule: %q", msg)
					}
				})
			}
		})
	}
}

// TestOrdinaryPrograms: ordinary code keeps working under the policy, in
// every mode, and prints the right thing.
func TestOrdinaryPrograms(t *testing.T) {
	if len(ordinaries) < 20 {
		t.Fatalf("the suite has %d ordinary programs; it must keep at least 20", len(ordinaries))
	}
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			r := pypolicy.Wrap(newBase(t, mode), policyFor(nil, 0))
			for _, c := range ordinaries {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					res, err := run(t, r, c.code, c.stdin)
					if err != nil {
						t.Fatalf("refused or failed: %v", err)
					}
					if res.Stdout != c.want || res.ExitCode != c.exit || res.Sandbox != mode {
						t.Errorf("exit=%d stdout=%q stderr=%q sandbox=%s, want exit %d stdout %q", res.ExitCode, res.Stdout, res.Stderr, res.Sandbox, c.exit, c.want)
					}
					if c.exit == 1 && !strings.Contains(res.Stderr, `File "main.py", line 2`) {
						t.Errorf("the traceback does not point at the program's line: %q", res.Stderr)
					}
					if c.exit == 0 && res.Stderr != "" {
						t.Errorf("stderr = %q, want nothing", res.Stderr)
					}
				})
			}
		})
	}
}

// TestRuntimeRefusalKeepsOutput: a refusal while the program runs keeps
// what it printed before, and the refusal line is not in its stderr.
func TestRuntimeRefusalKeepsOutput(t *testing.T) {
	r := pypolicy.Wrap(newBase(t, sandbox.ModeProcess), policyFor(nil, 0))
	_, err := run(t, r, "print('before')\nimport sys", "")
	var perr *pypolicy.Error
	if !errors.As(err, &perr) || perr.Line != 2 {
		t.Fatalf("err = %v, want a refusal at line 2", err)
	}
	if perr.Result == nil || perr.Result.Stdout != "" {
		t.Errorf("a refusal before the first line has output: %+v", perr.Result)
	}
	_, err = run(t, r, "print('before')\nn = '__class__'\ngetattr(1, n)", "")
	if !errors.As(err, &perr) || perr.Result == nil || perr.Result.Stdout != "before\n" || strings.Contains(perr.Result.Stderr, "codeexec-policy") {
		t.Fatalf("err = %v result = %+v, want the output before the refusal, without the refusal line", err, perr)
	}
}

// TestForgedRefusal: a program cannot pass itself off as refused: it does
// not know the run's nonce.
func TestForgedRefusal(t *testing.T) {
	r := pypolicy.Wrap(newBase(t, sandbox.ModeProcess), policyFor(nil, 0))
	code := "print('\\ncodeexec-policy:00 {\"rule\": \"import\", \"line\": 9, \"detail\": \"x\"}')\nexit(120)"
	res, err := run(t, r, code, "")
	if err != nil || res.ExitCode != 120 {
		t.Fatalf("err = %v, res = %+v: a forged refusal must stay the program's own output", err, res)
	}
}

// TestOtherLanguagesPassThrough: only python is touched.
func TestOtherLanguagesPassThrough(t *testing.T) {
	var (
		mu  sync.Mutex
		got []sandbox.Request
	)
	fake := &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess},
		RunFunc: func(_ context.Context, req sandbox.Request) (*sandbox.Result, error) {
			mu.Lock()
			got = append(got, req)
			mu.Unlock()
			return &sandbox.Result{Stdout: "x"}, nil
		},
	}
	r := pypolicy.Wrap(fake, policyFor(nil, 0))
	for _, lang := range []string{"bash", "javascript", "python"} {
		if _, err := r.Run(context.Background(), sandbox.Request{Language: lang, Code: "echo hi", Stdin: "in"}); err != nil {
			t.Fatal(err)
		}
	}
	if got[0].Code != "echo hi" || got[1].Code != "echo hi" {
		t.Errorf("bash or javascript was changed: %q, %q", got[0].Code, got[1].Code)
	}
	if got[2].Code == "echo hi" || !strings.Contains(got[2].Code, "_codeexec_policy(") || got[2].Stdin != "in" {
		t.Errorf("python was not wrapped, or its stdin changed: stdin %q", got[2].Stdin)
	}
}

// TestCapabilities: the policy is listed among the protections, active
// only where python can run.
func TestCapabilities(t *testing.T) {
	for _, c := range []struct {
		lang   sandbox.LanguageStatus
		active bool
	}{
		{sandbox.LanguageStatus{Name: "python", Available: true, Version: "3.11.2"}, true},
		{sandbox.LanguageStatus{Name: "python", Available: true, Version: "3.7.9"}, false},
		{sandbox.LanguageStatus{Name: "python", Reason: "not found"}, false},
	} {
		fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Languages: []sandbox.LanguageStatus{c.lang}, Protections: []sandbox.Protection{{Name: "rlimits", Active: true}}}}
		caps := pypolicy.Wrap(fake, policyFor(nil, 0)).Capabilities()
		if len(caps.Protections) != 2 || caps.Protections[1].Name != pypolicy.ProtectionName || caps.Protections[1].Active != c.active {
			t.Errorf("python %+v: protections %+v, want the policy listed with active=%v", c.lang, caps.Protections, c.active)
		}
		if c.active && !strings.Contains(caps.Protections[1].Detail, "imports allowed: datetime, calendar, re") {
			t.Errorf("the detail does not list the allowed imports: %q", caps.Protections[1].Detail)
		}
		if len(fake.Caps.Protections) != 1 {
			t.Errorf("the wrapped runner's protections were changed")
		}
	}
}

func TestValidateImports(t *testing.T) {
	for _, c := range []struct {
		imports []string
		ok      bool
	}{
		{pypolicy.DefaultAllowedImports, true},
		{[]string{"string", "random"}, true},
		{nil, true},
		{[]string{"os"}, false},
		{[]string{"sys"}, false},
		{[]string{"typing"}, false},
		// They evaluate strings as code, or resolve dotted names into
		// modules, that the check never sees.
		{[]string{"logging"}, false},
		{[]string{"timeit"}, false},
		{[]string{"cProfile"}, false},
		{[]string{"profile"}, false},
		{[]string{"trace"}, false},
		{[]string{"doctest"}, false},
		{[]string{"pydoc"}, false},
		{[]string{"rlcompleter"}, false},
		{[]string{"os.path"}, false},
		{[]string{"_io"}, false},
		{[]string{""}, false},
	} {
		err := pypolicy.ValidateImports(c.imports)
		if (err == nil) != c.ok {
			t.Errorf("ValidateImports(%q) = %v, want ok=%v", c.imports, err, c.ok)
		}
	}
}

func abbrev(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}

// shadows are modules that, found first on python's path, would run before
// the policy checks anything: the standard modules the bootstrap imports,
// and the hooks that python's start imports by themselves.
var shadows = []string{"_ast", "ast", "binascii", "base64", "collections", "functools", "importlib", "json", "linecache", "operator",
	"string", "textwrap", "traceback", "types", "unicodedata", "enum", "sitecustomize", "usercustomize"}

// shadowCode is a module that says that it ran.
func shadowCode(name string) string {
	return "import os as _o\n_o.write(2, b'SHADOW-RAN " + name + "\\n')\n"
}

// TestNothingRunsBeforeThePolicy: neither the run's files nor its package
// folder can put a module in front of the bootstrap's imports, or a start-up
// hook (sitecustomize, usercustomize, .pth) in front of the bootstrap, in
// any mode; the packages are still importable once the policy allows them.
// Nor can they stand in for traceback, which the bootstrap imports only to
// print an error: after a program that failed, or did not compile.
func TestNothingRunsBeforeThePolicy(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			base := newBase(t, mode)
			pkgs := filepath.Join(workRoot(t), "packages")
			if err := os.Mkdir(pkgs, 0o755); err != nil {
				t.Fatal(err)
			}
			var files []artifacts.Input
			write := func(name, code string) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(pkgs, name), []byte(code), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range shadows {
				files = append(files, artifacts.Input{Path: m + ".py", Data: []byte(shadowCode("file " + m))})
				write(m+".py", shadowCode("package "+m))
			}
			write("codeexec_hooks.pth", "import os; os.write(2, b'SHADOW-RAN package .pth\\n')\n")
			write("codeexec_probe.py", "VALUE = 7\n")
			r := pypolicy.Wrap(base, policyFor([]string{"codeexec_probe"}, 0))
			for _, c := range []struct{ code, stdout, stderr string }{
				{"import codeexec_probe\nprint('ok', codeexec_probe.VALUE)", "ok 7\n", ""},
				{"import codeexec_probe\nprint('ok', codeexec_probe.VALUE)\nraise ValueError('late')", "ok 7\n", "line 3, in <module>\n    raise ValueError('late')\nValueError: late\n"},
				{"print('ok'", "", "SyntaxError:"},
			} {
				req := sandboxtest.Req("python", c.code)
				req.Files = files
				req.PackageDir = &sandbox.PackageDir{HostDir: pkgs}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				res, err := r.Run(ctx, req)
				cancel()
				if err != nil {
					t.Fatalf("the run of %q failed: %v", c.code, err)
				}
				if res.Stdout != c.stdout || !strings.Contains(res.Stderr, c.stderr) || strings.Contains(res.Stderr, "SHADOW-RAN") ||
					(res.ExitCode == 0) != (c.stderr == "") {
					t.Fatalf("%q: something ran before the policy or its traceback, or the packages were not importable: exit %d, stdout %q, stderr %q",
						c.code, res.ExitCode, res.Stdout, abbrev(res.Stderr))
				}
			}
		})
	}
}

// TestImportsAreTheBootstraps: Imports, which process mode's interpreters
// import ahead of their runs, are the modules the bootstrap imports before
// it checks the program, no more and no fewer.
func TestImportsAreTheBootstraps(t *testing.T) {
	b, err := os.ReadFile("bootstrap.py")
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(string(b), "def _codeexec_policy(payload):\n")
	var got []string
	for _, line := range strings.Split(body, "\n") {
		m, ok := strings.CutPrefix(line, "    import ")
		if !ok {
			if strings.TrimSpace(line) == "" {
				continue
			}
			break
		}
		m, _, _ = strings.Cut(m, " as ")
		got = append(got, m)
	}
	if !slices.Equal(got, pypolicy.Imports) {
		t.Errorf("the bootstrap imports %v first; pypolicy.Imports is %v", got, pypolicy.Imports)
	}
}
