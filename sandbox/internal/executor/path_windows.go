package executor

// MinimalPath is empty on Windows: process mode looks for interpreters on
// the server's PATH (Windows has no fixed place for them), and gives the
// programs a PATH of the system's folders and the interpreters' own
// (sandbox/process).
const MinimalPath = ""
