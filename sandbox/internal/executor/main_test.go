package executor_test

import (
	"os"
	"testing"

	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// The benchmarks start supervised runs: this test binary is their helper.
func TestMain(m *testing.M) {
	executor.MaybeRunHelper()
	os.Exit(m.Run())
}
