package kube

import (
	"testing"

	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestOutputEndsWhole runs programs whose last output, an archive of 1.4 MB
// of artifacts, is written just before their pod's container ends:
// containerd 1.6's CRI (the test cluster's) loses what is in flight when a
// container exits, so each run must get all of it nonetheless.
func TestOutputEndsWhole(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{PoolSize: 1, PoolLimits: sandboxtest.DefaultLimits(), Languages: []string{"python"}})
	for i := range 6 {
		req := sandboxtest.Req("python", "open('big.bin', 'wb').write(bytes(range(256)) * 4096)\nopen('big.csv', 'w').write('x,y\\n' * 100000)")
		req.Artifacts = &artifacts.Options{MaxArtifacts: 20, MaxBytes: 16 << 20}
		res := run(t, r, req)
		if c := res.Artifacts; c == nil || len(c.Artifacts) != 2 || c.Incomplete != "" {
			t.Fatalf("run %d: the artifacts did not come back whole: %+v", i, c)
		}
	}
}
