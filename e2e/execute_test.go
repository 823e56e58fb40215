package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestDocumentedExample is the example of the documentation, over every
// transport, with each language, in process mode.
func TestDocumentedExample(t *testing.T) {
	t.Parallel()
	for _, transport := range allTransports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			cs, _ := connect(t, transport, serverEnv(t, nil), connectOpts{})
			checkExample(t, cs, "process")
			for _, c := range []struct{ lang, code, want string }{
				{"javascript", "console.log((2n**64n).toString())", "18446744073709551616\n"},
				{"bash", "echo $((6*7))", "42\n"},
				{"py", "print('alias')", "alias\n"},
			} {
				res, out := execute(t, cs, map[string]any{"language": c.lang, "code": c.code})
				if res.IsError || out.ExitCode != 0 || out.Stdout != c.want || out.Sandbox != "process" {
					t.Errorf("%s: isError=%v exit=%d stdout=%q stderr=%q sandbox=%q, want stdout %q",
						c.lang, res.IsError, out.ExitCode, out.Stdout, out.Stderr, out.Sandbox, c.want)
				}
			}
		})
	}
}

// TestModeNone: the example holds in mode none, which says it is unsandboxed.
func TestModeNone(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_SANDBOX": "none"}), connectOpts{})
	checkExample(t, cs, "none")
	res, out := execute(t, cs, map[string]any{"language": "bash", "code": "printf %s \"$" + secretName + "\""})
	// Mode none runs with the server's environment: this is the control
	// that shows the secret checks of process mode are not vacuous.
	if res.IsError || out.Stdout != secretValue {
		t.Errorf("mode none: stdout=%q, want the server's %s (mode none keeps the environment)", out.Stdout, secretName)
	}
	info := sandboxInfo(t, cs)
	if info.Mode != "none" || info.Sandboxed || len(info.Warnings) == 0 {
		t.Errorf("sandbox_info in mode none: mode=%q sandboxed=%v warnings=%q, want none, false and a warning", info.Mode, info.Sandboxed, info.Warnings)
	}
}

// TestStdinAndExitCode: stdin reaches the program; a non-zero exit is a
// result, not an error.
func TestStdinAndExitCode(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, nil), connectOpts{})
	res, out := execute(t, cs, map[string]any{"language": "bash", "code": "tr a-z A-Z", "stdin": "hello\n"})
	if res.IsError || out.Stdout != "HELLO\n" {
		t.Errorf("stdin: isError=%v stdout=%q stderr=%q", res.IsError, out.Stdout, out.Stderr)
	}
	res, out = execute(t, cs, map[string]any{"language": "bash", "code": "echo oops >&2; exit 3"})
	if res.IsError || out.ExitCode != 3 || out.Stderr != "oops\n" || out.TimedOut || out.Truncated || out.OOMKilled {
		t.Errorf("exit 3: isError=%v exit=%d stderr=%q flags=%v/%v/%v, want isError=false exit=3 stderr=%q",
			res.IsError, out.ExitCode, out.Stderr, out.TimedOut, out.Truncated, out.OOMKilled, "oops\n")
	}
	if txt := text(res); !strings.Contains(txt, "oops") || !strings.Contains(txt, "3") {
		t.Errorf("exit 3: the text content should show stderr and the exit code: %q", txt)
	}
	res, out = execute(t, cs, map[string]any{"language": "python", "code": "raise ValueError('boom')"})
	if res.IsError || out.ExitCode != 1 || !strings.Contains(out.Stderr, "ValueError: boom") {
		t.Errorf("exception: isError=%v exit=%d stderr=%q", res.IsError, out.ExitCode, out.Stderr)
	}
}

// TestProtocolVersions negotiates each protocol version the server claims
// and makes a call with it.
func TestProtocolVersions(t *testing.T) {
	t.Parallel()
	legacy := []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}
	all := append(append([]string{}, legacy...), "2026-07-28")
	for _, transport := range allTransports {
		versions := all
		if transport == sse {
			versions = legacy
		}
		for _, v := range versions {
			t.Run(transport+"/"+v, func(t *testing.T) {
				t.Parallel()
				cs, _ := connect(t, transport, serverEnv(t, nil), connectOpts{protocolVersion: v})
				if got := cs.InitializeResult().ProtocolVersion; got != v {
					t.Errorf("negotiated protocol version %q, want %q", got, v)
				}
				if si := cs.InitializeResult().ServerInfo; si == nil || si.Name != "codeexec" || si.Version != testVersion {
					t.Errorf("serverInfo = %+v, want name codeexec and version %s", si, testVersion)
				}
				checkExample(t, cs, "process")
			})
		}
	}
}

// TestLimits: timeout, output flood and the flags they set.
func TestLimits(t *testing.T) {
	t.Parallel()
	for _, transport := range allTransports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			cs, _ := connect(t, transport, serverEnv(t, map[string]string{"CODE_EXEC_MAX_OUTPUT": "64k"}), connectOpts{})

			var (
				res *mcp.CallToolResult
				out execResult
			)
			sandboxtest.UntilStarted(t, func(timeout time.Duration) string {
				res, out = execute(t, cs, map[string]any{"language": "python", "code": "print('started', flush=True)\nwhile True:\n    pass", "timeout_seconds": timeout.Seconds()})
				return out.Stdout
			})
			if !res.IsError || !out.TimedOut || out.ExitCode == 0 || out.Stdout != "started\n" {
				t.Errorf("timeout: isError=%v timed_out=%v exit=%d stdout=%q, want isError, timed_out, non-zero exit and the output so far",
					res.IsError, out.TimedOut, out.ExitCode, out.Stdout)
			}
			if !strings.Contains(strings.ToLower(text(res)), "timed out") {
				t.Errorf("timeout: the text does not say the run timed out: %q", text(res))
			}

			res, out = execute(t, cs, map[string]any{"language": "bash", "code": "yes flood", "timeout_seconds": 30})
			if !res.IsError || !out.Truncated || out.TimedOut {
				t.Errorf("flood: isError=%v truncated=%v timed_out=%v, want isError and truncated, not timed out", res.IsError, out.Truncated, out.TimedOut)
			}
			if n := len(out.Stdout) + len(out.Stderr); n > 64<<10 || n < 16<<10 {
				t.Errorf("flood: kept %d bytes of output, want at most the 64k cap (and some of it)", n)
			}

			checkExample(t, cs, "process")
		})
	}
}

// TestSecretsDoNotLeak: in process mode no program sees the server's
// environment, however it looks.
func TestSecretsDoNotLeak(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, nil), connectOpts{})
	probes := []struct{ lang, code string }{
		{"bash", "env; set; printenv " + secretName + "; echo \"${" + secretName + ":-unset}\""},
		{"bash", "cat /proc/self/environ; echo; cat /proc/$PPID/environ; echo; cat /proc/1/environ"},
		{"bash", `for f in /proc/[0-9]*/environ; do echo "== $f"; tr '\0' '\n' < "$f" 2>/dev/null; done; for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null; echo; done`},
		{"bash", `p=$$; while [ "$p" -gt 1 ]; do tr '\0' '\n' < /proc/$p/environ 2>/dev/null; p=$(awk '{print $4}' /proc/$p/stat 2>/dev/null || echo 1); done; echo walked`},
		{"python", "import os\nprint(dict(os.environ))\nprint(os.environ.get('" + secretName + "', 'unset'))"},
		{"python", `import os, glob
for f in ['/proc/self/environ', '/proc/%d/environ' % os.getppid()] + glob.glob('/proc/[0-9]*/environ'):
    try:
        print(f, open(f, 'rb').read())
    except Exception as e:
        print(f, 'unreadable:', type(e).__name__)
`},
		{"python", `import os
p = os.getpid()
while p > 1:
    try:
        print(p, open('/proc/%d/environ' % p, 'rb').read())
        p = int(open('/proc/%d/stat' % p).read().rsplit(')', 1)[1].split()[1])
    except Exception as e:
        print(p, type(e).__name__); break
`},
		{"javascript", "console.log(JSON.stringify(process.env)); try { console.log(require('fs').readFileSync('/proc/' + process.ppid + '/environ', 'latin1')) } catch (e) { console.log(e.code) }"},
	}
	for i, p := range probes {
		res, out := execute(t, cs, map[string]any{"language": p.lang, "code": p.code})
		all := text(res) + out.Stdout + out.Stderr
		if strings.Contains(all, secretValue) {
			t.Errorf("probe %d (%s) printed the server's secret:\n%s", i, p.lang, abbrev(p.code))
		}
		if !strings.Contains(p.code, secretName) && strings.Contains(all, secretName) {
			t.Errorf("probe %d (%s) sees the variable %s", i, p.lang, secretName)
		}
		if out.Stdout == "" {
			t.Errorf("probe %d (%s) printed nothing (stderr %q): it did not run as intended", i, p.lang, out.Stderr)
		}
	}
}

// infoResult is the part of sandbox_info the tests read.
type infoResult struct {
	Mode      string   `json:"mode"`
	Sandboxed bool     `json:"sandboxed"`
	Warnings  []string `json:"warnings"`
	Languages []struct {
		Name      string `json:"name"`
		Available bool   `json:"available"`
		Version   string `json:"version"`
		Packages  []struct {
			Name      string `json:"name"`
			Available bool   `json:"available"`
			Version   string `json:"version"`
		} `json:"packages"`
	} `json:"languages"`
	Limits      map[string]float64 `json:"limits"`
	Network     string             `json:"network"`
	Approval    string             `json:"approval"`
	Protections []struct {
		Name   string `json:"name"`
		Active bool   `json:"active"`
	} `json:"protections"`
	Workspace *struct {
		Path     string `json:"path"`
		HostDir  string `json:"host_dir"`
		Writable bool   `json:"writable"`
		Enforced bool   `json:"enforced"`
	} `json:"workspace"`
}

func sandboxInfo(t *testing.T, cs *mcp.ClientSession) infoResult {
	t.Helper()
	res := call(t, cs, "sandbox_info", map[string]any{})
	if res.IsError || res.StructuredContent == nil {
		t.Fatalf("sandbox_info: isError=%v structured=%v text=%q", res.IsError, res.StructuredContent != nil, text(res))
	}
	var info infoResult
	remarshal(t, res.StructuredContent, &info)
	return info
}

// TestSandboxInfo: sandbox_info reports the mode, the languages and the
// operator's limits.
func TestSandboxInfo(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, http_, serverEnv(t, map[string]string{
		"CODE_EXEC_MAX_TIMEOUT":     "30s",
		"CODE_EXEC_MAX_CONCURRENCY": "3",
		"CODE_EXEC_MAX_OUTPUT":      "64k",
	}), connectOpts{})
	info := sandboxInfo(t, cs)
	if info.Mode != "process" || !info.Sandboxed {
		t.Errorf("mode=%q sandboxed=%v, want process, true", info.Mode, info.Sandboxed)
	}
	langs := map[string]bool{}
	for _, l := range info.Languages {
		langs[l.Name] = l.Available
		if l.Available && l.Version == "" {
			t.Errorf("language %s is available but has no version", l.Name)
		}
	}
	for _, l := range []string{"python", "javascript", "bash"} {
		if !langs[l] {
			t.Errorf("language %s is not reported available: %+v", l, info.Languages)
		}
	}
	for k, want := range map[string]float64{"max_timeout_seconds": 30, "max_concurrency": 3, "max_output_bytes": 64 << 10, "default_timeout_seconds": 10} {
		if got, ok := info.Limits[k]; !ok || got != want {
			t.Errorf("limits.%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if info.Network == "" || info.Approval == "" || len(info.Protections) == 0 {
		t.Errorf("network=%q approval=%q protections=%d: all should be described", info.Network, info.Approval, len(info.Protections))
	}
}

func remarshal(t *testing.T, from, to any) {
	t.Helper()
	b, err := jsonMarshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := jsonUnmarshal(b, to); err != nil {
		t.Fatalf("decoding %s: %v", abbrev(string(b)), err)
	}
}
