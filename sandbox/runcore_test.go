package sandbox_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
)

// TestRunCoreIDCoversTheRunCore: RunCoreID hashes the Go files of every
// package of this module that the run helper links (what
// sandbox/process/early depends on), so that a helper of other sources is
// never taken for codeexec's own.
func TestRunCoreIDCoversTheRunCore(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.Module.Path}} {{.Dir}}{{end}}", "github.com/codeexec/codeexec/sandbox/process/early").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	self, err := exec.Command("go", "list", "-f", "{{.Dir}}\n{{join .EmbedPatterns \"\\n\"}}", "github.com/codeexec/codeexec/sandbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, self)
	}
	lines := strings.Split(strings.TrimSpace(string(self)), "\n")
	dir, patterns := lines[0], lines[1:]
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		mod, pkgDir, _ := strings.Cut(line, " ")
		if mod != "github.com/codeexec/codeexec" {
			continue
		}
		rel, err := filepath.Rel(dir, pkgDir)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("the run core's package %s is outside sandbox/, where RunCoreID cannot embed it", pkgDir)
			continue
		}
		want := filepath.ToSlash(filepath.Join(rel, "*.go"))
		if !slices.Contains(patterns, want) {
			t.Errorf("RunCoreID does not embed %s (the run core's package %s); its patterns: %q", want, pkgDir, patterns)
		}
	}
	if id := sandbox.RunCoreID(); len(id) != 64 || id != sandbox.RunCoreID() {
		t.Errorf("RunCoreID = %q, want the same 64 hex digits every time", id)
	}
}
