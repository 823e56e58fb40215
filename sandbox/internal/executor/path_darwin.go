package executor

// MinimalPath is the PATH of the programs of process mode, which looks for
// interpreters there: Homebrew's (/opt/homebrew on Apple silicon,
// /usr/local on Intel Macs), then the system's.
const MinimalPath = "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin"
