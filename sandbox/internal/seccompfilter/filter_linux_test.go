//go:build linux

package seccompfilter

import (
	"runtime"
	"slices"
	"testing"
)

func TestSeccompPolicyAssembles(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the filter is built for amd64 and arm64 only")
	}
	p, err := seccompPolicy()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := p.Assemble()
	if err != nil {
		t.Fatalf("the filter does not assemble: %v", err)
	}
	if len(prog) < len(refusedSyscalls) {
		t.Fatalf("a filter of %d instructions cannot refuse %d system calls", len(prog), len(refusedSyscalls))
	}
	// What runs get: every instruction, 8 bytes each (the exec stage's
	// applySeccomp installs it; its tests check what it refuses).
	if b, err := Program(); err != nil || len(b) != 8*len(prog) {
		t.Fatalf("Program() = %d bytes, %v; want %d instructions of 8 bytes", len(b), err, len(prog))
	}
	refused := p.Syscalls[0].Names
	for _, name := range []string{"setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "io_uring_setup", "userfaultfd", "mount", "ptrace", "init_module"} {
		if !slices.Contains(refused, name) {
			t.Errorf("%s is not refused", name)
		}
	}
}
