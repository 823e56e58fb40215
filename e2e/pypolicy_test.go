package e2e

import (
	"strings"
	"testing"
)

// TestRestrictedPython: with CODE_EXEC_PYTHON_POLICY=restricted, a program
// the policy refuses is an isError result whose one sentence names the rule
// and the line; an ordinary program runs; other languages are untouched;
// and sandbox_info lists the policy with the allowed imports.
func TestRestrictedPython(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{
		"CODE_EXEC_PYTHON_POLICY":          "restricted",
		"CODE_EXEC_PYTHON_ALLOWED_IMPORTS": "math,json",
	}), connectOpts{})

	res := call(t, cs, "code_execute", map[string]any{"language": "python", "code": "x = 1\nprint(().__class__.__base__.__subclasses__())"})
	msg := text(res)
	if !res.IsError || !strings.HasPrefix(msg, "The restricted Python policy refused line 2:") || !strings.Contains(msg, "(rule dunder-attribute)") || strings.Contains(msg, "\n") {
		t.Errorf("refused program: isError=%v text=%q, want isError and one sentence naming line 2 and the rule", res.IsError, msg)
	}
	res = call(t, cs, "code_execute", map[string]any{"language": "python", "code": "import math\nimport os"})
	if msg := text(res); !res.IsError || !strings.Contains(msg, "line 2") || !strings.Contains(msg, `"os" is not among the allowed imports (math, json)`) {
		t.Errorf("refused import: isError=%v text=%q", res.IsError, msg)
	}

	res, out := execute(t, cs, map[string]any{"language": "python", "code": "import math, json\nprint(2**64, math.isqrt(50), json.dumps([input()]))", "stdin": "hi\n"})
	if res.IsError || out.ExitCode != 0 || out.Stdout != "18446744073709551616 7 [\"hi\"]\n" || out.Stderr != "" {
		t.Errorf("ordinary program: isError=%v exit=%d stdout=%q stderr=%q", res.IsError, out.ExitCode, out.Stdout, out.Stderr)
	}
	res, out = execute(t, cs, map[string]any{"language": "bash", "code": "echo $((6*7))"})
	if res.IsError || out.Stdout != "42\n" {
		t.Errorf("bash under the python policy: isError=%v stdout=%q", res.IsError, out.Stdout)
	}

	info := call(t, cs, "sandbox_info", map[string]any{})
	var found bool
	for _, p := range sandboxInfo(t, cs).Protections {
		found = found || p.Name == "restricted python" && p.Active
	}
	if !found || !strings.Contains(text(info), "imports allowed: math, json") {
		t.Errorf("sandbox_info does not list the active policy with its imports: %s", abbrev(text(info)))
	}
}
