package host_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

func newRunner(t *testing.T) *host.Runner {
	t.Helper()
	r, err := host.New(context.Background(), host.Config{Languages: sandbox.LanguageNames(), WorkRoot: t.TempDir()})
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

func TestSuite(t *testing.T) {
	sandboxtest.RunSuite(t, newRunner(t), sandboxtest.Options{Mode: sandbox.ModeNone})
}

// Mode none promises the opposite of scrubbing: the server's environment.
func TestSeesServerEnvironment(t *testing.T) {
	t.Setenv("CODE_EXEC_TEST_VISIBLE", "visible-in-mode-none")
	r := newRunner(t)
	res, err := r.Run(context.Background(), sandboxtest.Req("bash", `echo "$CODE_EXEC_TEST_VISIBLE"`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "visible-in-mode-none\n" {
		t.Fatalf("stdout = %q", res.Stdout)
	}
}

func TestCapabilitiesWarn(t *testing.T) {
	caps := newRunner(t).Capabilities()
	if len(caps.Warnings) == 0 || !strings.Contains(caps.Warnings[0], "UNSANDBOXED") {
		t.Fatalf("mode none must warn loudly, got %q", caps.Warnings)
	}
	for _, p := range caps.Protections {
		if p.Active && (p.Name == "scrubbed environment" || p.Name == "network isolation") {
			t.Fatalf("mode none claims %q", p.Name)
		}
	}
	if caps.Isolation != (sandbox.Isolation{}) {
		t.Fatalf("mode none declares isolation: %+v", caps.Isolation)
	}
}

// In mode none the allowlist is advice: programs are pointed at the proxy,
// which enforces it on what goes through it, and sandbox_info says so.
func TestEgressIsAdviceOnly(t *testing.T) {
	e := sandboxtest.StartEgress(t, "127.0.0.1")
	t.Setenv("HTTP_PROXY", "http://server-own-proxy.invalid:1")
	r, err := host.New(context.Background(), host.Config{Languages: []string{"python"}, WorkRoot: t.TempDir(), Egress: proxy.New(e.Policy(t, true), nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	found := false
	for _, w := range r.Capabilities().Warnings {
		found = found || w == host.EgressWarning
	}
	if !found {
		t.Fatalf("warnings %q lack the egress warning", r.Capabilities().Warnings)
	}
	res, err := r.Run(context.Background(), sandboxtest.Req("python", e.Program()))
	if err != nil {
		t.Fatal(err)
	}
	if got := sandboxtest.Line(res.Stdout, "http"); got != "200 plain-ok" {
		t.Fatalf("http: %q\n%s%s", got, res.Stdout, res.Stderr)
	}
	if got := sandboxtest.Line(res.Stdout, "notlisted"); got != "HTTP 403" {
		t.Fatalf("notlisted: %q", got)
	}
	if res.Network == nil || len(res.Network.Reached) == 0 || len(res.Network.Refused) == 0 {
		t.Fatalf("network report = %+v", res.Network)
	}
	// A run's own allowlist (a principal's network) narrows the proxy's,
	// for runs and sessions.
	e.CheckNarrowedEgress(t, r, r.Sessions())
	// A session's calls are pointed at the proxy too (not at the server's
	// own), each with a report of its own.
	s := sandboxtest.StartSession(t, r.Sessions(), "python")
	for i := range 2 {
		res := sandboxtest.SessionCall(t, s, "python", e.Program())
		if got := sandboxtest.Line(res.Stdout, "http"); got != "200 plain-ok" {
			t.Fatalf("session call %d: http: %q\n%s%s", i, got, res.Stdout, res.Stderr)
		}
		if res.Network == nil || len(res.Network.Reached) == 0 || res.Network.Reached[0].Connections != 1 {
			t.Fatalf("session call %d: network report = %+v", i, res.Network)
		}
	}
}

func TestSessionSuite(t *testing.T) {
	sandboxtest.RunSessionSuite(t, newRunner(t).Sessions(), sandboxtest.SessionOptions{
		Mode:        sandbox.ModeNone,
		Gone:        func(t *testing.T, dir string) bool { _, err := os.Stat(dir); return os.IsNotExist(err) },
		DirUncapped: "mode none caps nothing: a session's directory is the host's",
	})
}

// A session's programs get a run's environment: WORKSPACE, and python's
// figure hook where the host's python has matplotlib.
func TestSessionEnvironmentIsARuns(t *testing.T) {
	ws := t.TempDir()
	r, err := host.New(context.Background(), host.Config{Languages: []string{"python", "bash"}, WorkRoot: t.TempDir(), Workspace: &sandbox.Workspace{Dir: ws}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	sh := sandboxtest.StartSession(t, r.Sessions(), "bash")
	if res := sandboxtest.SessionCall(t, sh, "bash", `echo "$WORKSPACE"`); res.Stdout != ws+"\n" {
		t.Errorf("WORKSPACE in a session: %q", res.Stdout)
	}
	st, _ := r.Capabilities().Language("python")
	if !slices.ContainsFunc(st.Packages, func(p sandbox.Package) bool { return p.Name == "matplotlib" && p.Available }) {
		t.Skip("the host's python has no matplotlib")
	}
	py := sandboxtest.StartSession(t, r.Sessions(), "python")
	req := sandboxtest.HeavyReq("python", "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
	req.Artifacts = &artifacts.Options{}
	res, err := py.Exec(context.Background(), req)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if len(res.Artifacts.Artifacts) != 1 || res.Artifacts.Artifacts[0].Path != "figure_1.png" {
		t.Fatalf("artifacts %+v (stderr %q), want figure_1.png", res.Artifacts, res.Stderr)
	}
}
