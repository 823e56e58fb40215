//go:build !linux && !darwin

package process

import (
	"context"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// probeIsolation reports every kernel isolation feature as unavailable:
// they need Linux.
func (r *Runner) probeIsolation(ctx context.Context, disabled []Feature, uid int) (executor.Isolation, []sandbox.Protection) {
	r.shield = notShielded()
	return executor.Isolation{}, linuxOnlyProtections()
}

// tryIsolation has nothing to try outside Linux.
func (r *Runner) tryIsolation(ctx context.Context, iso executor.Isolation) error { return nil }
