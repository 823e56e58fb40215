package executor_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

func BenchmarkSpawnTrue(b *testing.B) {
	dir := b.TempDir()
	lim := sandbox.Limits{Timeout: 10 * time.Second, OutputBytes: 1 << 20}
	b.Run("exec", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/usr/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("spawn-plain", func(b *testing.B) {
		for b.Loop() {
			res := &sandbox.Result{}
			if err := executor.Spawn(context.Background(), executor.Spec{Path: "/usr/bin/true", Env: os.Environ(), Dir: dir, Limits: lim}, res); err != nil || res.ExitCode != 0 {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("spawn-rlimits", func(b *testing.B) {
		lim := lim
		lim.Processes, lim.MemoryBytes, lim.OpenFiles = 64, 256<<20, 256
		for b.Loop() {
			res := &sandbox.Result{}
			if err := executor.Spawn(context.Background(), executor.Spec{Path: "/usr/bin/true", Env: os.Environ(), Dir: dir, Limits: lim, Rlimits: true, NoNewPrivs: true}, res); err != nil || res.ExitCode != 0 {
				b.Fatal(err, res)
			}
		}
	})
}
