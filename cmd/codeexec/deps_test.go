package main

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layers of codeexec, as docs/architecture.md draws them, and the
// dependency rules that keep them apart (in the spirit of Tailscale's
// deptest): TestLayers fails when a package imports one it must not.

// module is the module path; the tables below name packages without it.
const module = "github.com/codeexec/codeexec"

// layers are every package of the module, from the bottom up. Outside its
// tests, a package imports only packages of its own layer and of the
// layers below.
var layers = []struct {
	name string
	pkgs []string
}{
	{"foundations: the Runner contract and what every part shares", []string{"sandbox", "sandbox/artifacts", "sandbox/egress", "sandbox/datascience", "server/httpserve"}},
	{"the parts of the sandboxes", []string{"sandbox/egress/proxy", "sandbox/sessions", "sandbox/internal/executor", "sandbox/internal/procfs", "sandbox/internal/seccompfilter", "sandbox/internal/sessionproc", "sandbox/internal/runproto", "sandbox/internal/warmpool", "sandbox/internal/lifecycle", "sandbox/kube/internal/kubeapi", "sandbox/docker/image", "sandbox/process/seatbelt"}},
	{"the modes", []string{"sandbox/docker", "sandbox/process", "sandbox/process/early", "sandbox/host", "sandbox/kube"}},
	{"the layers of the runner chain", []string{"sandbox/pypolicy", "sandbox/packages", "approvals", "approvals/audit", "server/principals", "server/runtoken", "server/metrics"}},
	{"test support", testSupport},
	{"the MCP server", []string{"server", "server/cancels", "server/progress", "server/tasks", "server/replicas"}},
	{"the configuration", []string{"configs"}},
	{"the binaries and the suites that drive them", []string{"cmd/codeexec", "cmd/codeexec-sandbox", "cmd/codeexec-bench", "cmd/codeexec-test", "e2e", "sandbox/bench"}},
}

// testSupport are the packages that tests share (fakes, suites, an index
// server): nothing but tests and test support imports them.
var testSupport = []string{"sandbox/sandboxtest", "sandbox/packages/packagestest", "sandbox/kube/kubetest"}

// modes are the packages of the sandbox modes and their run cores, which
// only cmd/codeexec puts together with the rest.
var modes = []string{"sandbox/docker", "sandbox/process", "sandbox/process/early", "sandbox/host", "sandbox/kube", "sandbox/internal/executor", "sandbox/internal/seccompfilter", "sandbox/internal/sessionproc"}

// forbidden are dependencies, direct or not, that the layering alone would
// allow: which packages must not depend on which, and why.
var forbidden = []struct {
	from, to []string
	why      string
}{
	{[]string{"server", "server/cancels", "server/progress", "server/tasks", "server/replicas", "server/metrics", "server/principals", "server/runtoken", "server/httpserve"}, append([]string{"configs"}, modes...),
		"the MCP server is given the runner chain and its Options by cmd/codeexec: it knows neither the modes nor the configuration"},
	{[]string{"sandbox/pypolicy", "sandbox/packages", "approvals", "approvals/audit", "server/principals", "server/runtoken", "server/metrics", "sandbox/sessions"}, modes,
		"a layer of the runner chain wraps any sandbox.Runner: only cmd/codeexec knows the modes"},
	{[]string{"sandbox/docker", "sandbox/kube"}, []string{"sandbox/internal/executor", "sandbox/internal/seccompfilter", "sandbox/internal/sessionproc", "sandbox/process"},
		"docker and kubernetes mode run their programs in containers, not on process mode's run core"},
	{[]string{"sandbox/kube"}, []string{"sandbox/docker"},
		"kubernetes mode shares docker mode's protocol through sandbox/internal/runproto, not its engine client"},
	{[]string{"configs"}, modes,
		"configs is plain data: the domain values are built where they are used"},
}

// listed is what go list says of a package.
type listed struct {
	ImportPath string
	Imports    []string // direct, outside its tests
	Deps       []string // direct and indirect, outside its tests
}

// ours returns the packages of the module in paths, without the module
// path.
func ours(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == module {
			out = append(out, "")
		} else if rest, ok := strings.CutPrefix(p, module+"/"); ok {
			out = append(out, rest)
		}
	}
	return out
}

// TestLayers: every package of the module is in a layer; none imports a
// package of a higher layer, nor depends on one that forbidden rules out;
// and nothing but tests and test support imports the test support.
func TestLayers(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the packages with")
	}
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	layerOf := map[string]int{}
	for i, l := range layers {
		for _, p := range l.pkgs {
			layerOf[p] = i
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		name := ours([]string{p.ImportPath})[0]
		mine, ok := layerOf[name]
		if !ok {
			t.Errorf("%s is in no layer: add it to layers (cmd/codeexec/deps_test.go) and to docs/architecture.md", name)
			continue
		}
		for _, imp := range ours(p.Imports) {
			if theirs, ok := layerOf[imp]; ok && theirs > mine {
				t.Errorf("%s (%s) imports %s, of a higher layer (%s)", name, layers[mine].name, imp, layers[theirs].name)
			}
			if slices.Contains(testSupport, imp) && !slices.Contains(testSupport, name) {
				t.Errorf("%s imports the test support %s outside its tests", name, imp)
			}
		}
		deps := ours(p.Deps)
		for _, f := range forbidden {
			if !slices.Contains(f.from, name) {
				continue
			}
			for _, to := range f.to {
				if slices.Contains(deps, to) {
					t.Errorf("%s depends on %s: %s", name, to, f.why)
				}
			}
		}
	}
}
