//go:build linux

package executor

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLastStepsCannotBePreempted reads the compiled exec stage: from the
// first rlimit to the execve nothing may preempt the goroutine (see
// lastSteps). It builds the run helper as it ships (a test binary has no
// symbol table) and checks, in its machine code, that
// lastSteps exists as a function of its own (a body inlined into a
// preemptible caller would be preemptible), that neither it nor anything
// it calls has a stack check (the call to runtime.morestack that a
// preemption request takes, and that marks a function preemptible by
// signal), and that it calls nothing but the raw system-call functions.
func TestLastStepsCannotBePreempted(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test reads the compiled code with go tool objdump: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "codeexec-sandbox")
	if out, err := exec.Command(goTool, "build", "-o", exe, "github.com/codeexec/codeexec/cmd/codeexec-sandbox").CombinedOutput(); err != nil {
		t.Fatalf("building the run helper: %v\n%s", err, out)
	}
	// The functions lastSteps may reach, and the assembly under them.
	const allowed = `executor\.(lastSteps|closeFromRaw|resetSignalsRaw)|syscall\.RawSyscall6?|internal/runtime/syscall/linux\.Syscall6`
	// And its caller, to see that it calls lastSteps rather than holding a
	// copy of its body.
	out, err := exec.Command(goTool, "tool", "objdump", "-s", `(^|/)(executor\.execWithLimits|`+allowed+`)(\.abi0)?$`, exe).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool objdump: %v\n%s", err, out)
	}
	allowedRE := regexp.MustCompile("(^|/)(" + allowed + `)(\.abi0)?\(SB\)$`)
	funcs := map[string][]string{} // function: the targets of its calls
	var cur string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "TEXT" {
			cur = strings.TrimSuffix(f[1], "(SB)")
			funcs[cur] = nil
			continue
		}
		if i := strings.Index(line, "CALL "); i >= 0 && cur != "" {
			funcs[cur] = append(funcs[cur], strings.Fields(line[i+len("CALL "):])[0])
		}
	}
	const (
		pkg    = "github.com/codeexec/codeexec/sandbox/internal/executor."
		name   = pkg + "lastSteps"
		caller = pkg + "execWithLimits"
	)
	if !slices.Contains(funcs[caller], name+"(SB)") {
		t.Fatalf("%s does not call %s (inlined?): the last steps would be preemptible\n%s", caller, name, out)
	}
	// Walk what lastSteps calls.
	seen := map[string]bool{}
	var walk func(fn string)
	walk = func(fn string) {
		if seen[fn] {
			return
		}
		seen[fn] = true
		calls, ok := funcs[fn]
		if !ok {
			t.Errorf("%s, called on the way to execve, is not in the listing", fn)
			return
		}
		for _, c := range calls {
			switch {
			case strings.Contains(c, "morestack"):
				t.Errorf("%s has a stack check (it calls %s): a preemption point before execve", fn, c)
			case !allowedRE.MatchString(c):
				t.Errorf("%s calls %s, which may allocate, preempt or start a thread under the run's limits", fn, c)
			default:
				walk(strings.TrimSuffix(c, "(SB)"))
			}
		}
	}
	walk(name)
	if !seen["syscall.RawSyscall6"] && !seen["syscall.RawSyscall6.abi0"] {
		t.Errorf("lastSteps calls no syscall.RawSyscall6 (the listing changed shape?):\n%s", out)
	}
}
