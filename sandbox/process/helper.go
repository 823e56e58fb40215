package process

// Every run starts codeexec's run core twice, as its supervisor and as its
// exec stage (see sandbox/internal/executor). Started from the codeexec
// binary, each start also initializes the server's packages (the MCP SDK,
// the Docker and Kubernetes clients, Prometheus, ...): measured on the
// project's 2-core VM, 5.2–7.4 ms of CPU, where the run helper, a binary
// of the run core alone (cmd/codeexec-sandbox), takes 2.4–3.0 ms. The
// helper is used when it lies beside the codeexec binary and has the same
// run core; otherwise runs start codeexec itself, as before.

// HelperName is the run helper's file name, beside the codeexec binary.
const HelperName = "codeexec-sandbox"
