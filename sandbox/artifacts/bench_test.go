//go:build unix

package artifacts_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// BenchmarkCollectPlainRun is what collecting artifacts adds to a plain run
// in process and none modes: a walk of a run directory that holds only the
// program file (go test ./sandbox/artifacts -run '^$' -bench .).
func BenchmarkCollectPlainRun(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte("print(2**64)\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	ignore := func(p string, isDir bool) bool { return p == "main.py" || artifacts.DefaultIgnore(p, isDir) }
	snap, err := artifacts.Write(dir, nil, artifacts.WriteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, snap, artifacts.Options{Ignore: ignore})
		if err != nil || len(c.Artifacts) != 0 {
			b.Fatal(c, err)
		}
	}
}

// BenchmarkCollectChart is a run that made one chart next to its input.
func BenchmarkCollectChart(b *testing.B) {
	dir := b.TempDir()
	in, _ := artifacts.Decode([]artifacts.File{{Path: "sales.csv", Content: "month,revenue\nJan,1\n"}}, artifacts.InputLimits{})
	snap, err := artifacts.Write(dir, in, artifacts.WriteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "figure_1.png"), make([]byte, 30<<10), 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c, err := artifacts.Collect(artifacts.DirSource{Dir: dir}, snap, artifacts.Options{})
		if err != nil || len(c.Artifacts) != 1 {
			b.Fatal(c, err)
		}
	}
}
