//go:build !linux

package process

import (
	"context"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// probeIsolation reports every kernel isolation feature as unavailable:
// they need Linux.
func (r *Runner) probeIsolation(ctx context.Context, disabled []Feature, uid int) (executor.Isolation, []sandbox.Protection) {
	var ps []sandbox.Protection
	for _, f := range Features {
		if f == FeatureCgroup || f == FeatureUIDRange {
			continue // set up by the Runner
		}
		ps = append(ps, sandbox.Protection{Name: protectionName(f), Detail: "needs Linux"})
	}
	r.shield = sandbox.Protection{Name: "server out of reach", Detail: "needs Linux: code runs as the server's own user and may read its environment"}
	return executor.Isolation{}, ps
}

// tryIsolation has nothing to try outside Linux.
func (r *Runner) tryIsolation(ctx context.Context, iso executor.Isolation) error { return nil }
