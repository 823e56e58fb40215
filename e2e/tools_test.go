package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func listTools(t *testing.T, cs *mcp.ClientSession) *mcp.ListToolsResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	return res
}

// TestToolsList: both tools, with annotations, required arguments and an
// output schema, over every transport.
func TestToolsList(t *testing.T) {
	t.Parallel()
	for _, transport := range allTransports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			cs, _ := connect(t, transport, serverEnv(t, nil), connectOpts{})
			res := listTools(t, cs)
			tools := map[string]*mcp.Tool{}
			for _, tool := range res.Tools {
				tools[tool.Name] = tool
			}
			for _, name := range []string{"code_execute", "sandbox_info"} {
				tool := tools[name]
				if tool == nil {
					t.Errorf("tools/list has no %s (tools: %v)", name, toolNames(res))
					continue
				}
				if tool.Description == "" {
					t.Errorf("%s has no description", name)
				}
				a := tool.Annotations
				if a == nil || a.Title == "" || a.DestructiveHint == nil || a.OpenWorldHint == nil {
					t.Errorf("%s: annotations must set title, destructiveHint and openWorldHint: %+v", name, a)
				}
				if tool.OutputSchema == nil {
					t.Errorf("%s has no outputSchema", name)
				}
			}
			if tool := tools["code_execute"]; tool != nil {
				var schema struct {
					Type       string         `json:"type"`
					Required   []string       `json:"required"`
					Properties map[string]any `json:"properties"`
				}
				remarshal(t, tool.InputSchema, &schema)
				if schema.Type != "object" || !slices.Contains(schema.Required, "language") || !slices.Contains(schema.Required, "code") {
					t.Errorf("code_execute inputSchema must be an object requiring language and code: %+v", schema)
				}
				for _, p := range []string{"language", "code", "stdin", "timeout_seconds"} {
					if _, ok := schema.Properties[p]; !ok {
						t.Errorf("code_execute inputSchema has no property %s", p)
					}
				}
				var out struct {
					Required []string `json:"required"`
				}
				remarshal(t, tool.OutputSchema, &out)
				for _, f := range []string{"exit_code", "stdout", "stderr", "timed_out", "oom_killed", "truncated", "duration_ms", "sandbox"} {
					if !slices.Contains(out.Required, f) {
						t.Errorf("code_execute outputSchema does not require %s", f)
					}
				}
				// destructiveHint and openWorldHint follow the isolation in
				// force (TestHintsFollowIsolation).
				if a := tool.Annotations; a != nil && a.ReadOnlyHint {
					t.Errorf("code_execute must not claim to be read-only: %+v", a)
				}
			}
			if tool := tools["sandbox_info"]; tool != nil && tool.Annotations != nil && !tool.Annotations.ReadOnlyHint {
				t.Errorf("sandbox_info should be readOnlyHint: %+v", tool.Annotations)
			}
		})
	}
}

func toolNames(res *mcp.ListToolsResult) []string {
	var names []string
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	return names
}

// TestToolsSnapshot: the tools are an API; this fails when tools/list, as
// the go-sdk client sees it in process mode, changes. Regenerate with
// go test ./e2e/ -run TestToolsSnapshot -update.
//
// code_execute's openWorld and destructive hints follow the isolation active
// on the host, so the snapshot is taken with process mode's kernel isolation
// turned off, the same on every host; TestHintsFollowIsolation covers the
// other side.
func TestToolsSnapshot(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_PROCESS_DISABLE": "user,pid,network,ipc,uts,mount,landlock"}), connectOpts{})
	got, err := json.MarshalIndent(listTools(t, cs), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "tools.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./e2e/ -run TestToolsSnapshot -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("tools/list changed; if that is intended, run go test ./e2e/ -run TestToolsSnapshot -update and review the diff.\n%s", lineDiff(string(want), string(got)))
	}
}

// TestHintsFollowIsolation: with its network and filesystem isolated,
// process mode's code_execute is neither open-world nor destructive.
func TestHintsFollowIsolation(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, nil), connectOpts{})
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "sandbox_info", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var info struct {
		Protections []struct {
			Name   string `json:"name"`
			Active bool   `json:"active"`
		} `json:"protections"`
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatal(err)
	}
	active := map[string]bool{}
	for _, p := range info.Protections {
		active[p.Name] = p.Active
	}
	for _, tool := range listTools(t, cs).Tools {
		if tool.Name != "code_execute" {
			continue
		}
		a := tool.Annotations
		if a.OpenWorldHint == nil || *a.OpenWorldHint != !active["network isolation"] {
			t.Errorf("openWorldHint = %v with network isolation active = %v", a.OpenWorldHint, active["network isolation"])
		}
		if a.DestructiveHint == nil || *a.DestructiveHint != !active["filesystem isolation"] {
			t.Errorf("destructiveHint = %v with filesystem isolation active = %v", a.DestructiveHint, active["filesystem isolation"])
		}
	}
}

// lineDiff shows the lines that differ, briefly.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	n := max(len(w), len(g))
	shown := 0
	for i := 0; i < n && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("line " + itoa(i+1) + ":\n  - " + wl + "\n  + " + gl + "\n")
			shown++
		}
	}
	return b.String()
}

// TestBadInput: every rejection is a one-sentence tool error that names the
// problem, carries no structuredContent, and the server keeps serving.
func TestBadInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		tool string
		args any
		want []string // each must appear in the error text (case-insensitive)
	}{
		{"unknown language", "code_execute", map[string]any{"language": "cobol", "code": "DISPLAY 'HI'."}, []string{"cobol", "python"}},
		{"empty language", "code_execute", map[string]any{"language": "", "code": "print(1)"}, []string{"language"}},
		{"empty code", "code_execute", map[string]any{"language": "python", "code": ""}, []string{"code", "empty"}},
		{"blank code", "code_execute", map[string]any{"language": "python", "code": " \n\t "}, []string{"code", "empty"}},
		{"code too large", "code_execute", map[string]any{"language": "python", "code": "#" + strings.Repeat("x", 2048)}, []string{"CODE_EXEC_MAX_CODE"}},
		{"NUL byte in code", "code_execute", map[string]any{"language": "python", "code": "print(1)\x00"}, []string{"NUL"}},
		{"language is a number", "code_execute", map[string]any{"language": 5, "code": "print(1)"}, []string{"language", "string"}},
		{"code is an object", "code_execute", map[string]any{"language": "python", "code": map[string]any{"text": "print(1)"}}, []string{"code", "string"}},
		{"stdin too large", "code_execute", map[string]any{"language": "python", "code": "print(1)", "stdin": strings.Repeat("s", 2048)}, []string{"stdin", "CODE_EXEC_MAX_STDIN"}},
		{"stdin is a number", "code_execute", map[string]any{"language": "python", "code": "print(1)", "stdin": 3}, []string{"stdin"}},
		{"extra argument", "code_execute", map[string]any{"language": "python", "code": "print(1)", "network": true}, []string{"network"}},
		{"missing code", "code_execute", map[string]any{"language": "python"}, []string{"code"}},
		{"missing language", "code_execute", map[string]any{"code": "print(1)"}, []string{"language"}},
		{"no arguments", "code_execute", map[string]any{}, []string{"language"}},
		{"negative timeout", "code_execute", map[string]any{"language": "python", "code": "print(1)", "timeout_seconds": -1}, []string{"timeout_seconds"}},
		{"zero timeout", "code_execute", map[string]any{"language": "python", "code": "print(1)", "timeout_seconds": 0}, []string{"timeout_seconds"}},
		{"absurd timeout", "code_execute", map[string]any{"language": "python", "code": "print(1)", "timeout_seconds": 1e308}, []string{"timeout_seconds", "CODE_EXEC_MAX_TIMEOUT"}},
		{"timeout above cap", "code_execute", map[string]any{"language": "python", "code": "print(1)", "timeout_seconds": 31}, []string{"timeout_seconds", "30"}},
		{"timeout is a string", "code_execute", map[string]any{"language": "python", "code": "print(1)", "timeout_seconds": "5"}, []string{"timeout_seconds"}},
		{"sandbox_info with arguments", "sandbox_info", map[string]any{"verbose": true}, []string{"argument"}},
	}
	for _, transport := range allTransports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			cs, _ := connect(t, transport, serverEnv(t, map[string]string{
				"CODE_EXEC_MAX_CODE":    "1k",
				"CODE_EXEC_MAX_STDIN":   "1k",
				"CODE_EXEC_MAX_TIMEOUT": "30s",
			}), connectOpts{})
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					res := call(t, cs, c.tool, c.args)
					msg := text(res)
					if !res.IsError {
						t.Errorf("isError = false, want true (text %q)", abbrev(msg))
					}
					if res.StructuredContent != nil {
						t.Errorf("a rejection carries structuredContent: %v", res.StructuredContent)
					}
					if msg == "" || strings.Contains(strings.TrimSpace(msg), "\n") || len(msg) > 400 {
						t.Errorf("the error should be one short sentence: %q", msg)
					}
					for _, w := range c.want {
						if !strings.Contains(strings.ToLower(msg), strings.ToLower(w)) {
							t.Errorf("the error %q does not mention %q", msg, w)
						}
					}
					checkExample(t, cs, "process")
				})
			}
		})
	}
}

// TestUnknownTool: calling a tool that does not exist is an error (of the
// protocol or of the tool), and the server keeps serving.
func TestUnknownTool(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, nil), connectOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "rm_rf", Arguments: map[string]any{}})
	if err == nil && !res.IsError {
		t.Errorf("calling an unknown tool succeeded: %q", text(res))
	}
	checkExample(t, cs, "process")
}
