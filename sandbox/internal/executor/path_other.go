//go:build !darwin && !windows

package executor

// MinimalPath is the PATH of the supervisor, and of the programs of process
// mode, which looks for interpreters there.
const MinimalPath = "/usr/local/bin:/usr/bin:/bin"
