package server

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// A tool's arguments are declared once, as a list of params: its inputSchema
// (argSchema) and its argument decoder (decodeArgs) are both made from that
// list, so that the two cannot drift.

// param declares one argument: its name, JSON type and description for the
// schema, and how a value of that type is checked and stored.
type param struct {
	name        string
	description string
	required    bool
	// jsonType is "string", "number" or "array".
	jsonType string
	// schema holds more of the property's JSON Schema (an array's items).
	schema map[string]any
	// expected names the type in errors ("a string", "a number of seconds").
	expected string
	// exclusiveMinimum, if not nil, is declared in the schema; set gives
	// the model a more helpful error for a value at or below it.
	exclusiveMinimum *float64
	// set checks a value of jsonType (string or float64) against the
	// operator's limits and stores it; a refusal is an *ArgError.
	set func(v any) error
}

// stringParam declares a string argument; set receives the string.
func stringParam(name, description string, required bool, set func(string) error) param {
	return param{name: name, description: description, required: required, jsonType: "string", expected: "a string",
		set: func(v any) error { return set(v.(string)) }}
}

// numberParam declares a number argument above exclusiveMinimum; set
// receives the number.
func numberParam(name, description, expected string, exclusiveMinimum float64, set func(float64) error) param {
	return param{name: name, description: description, jsonType: "number", expected: expected, exclusiveMinimum: &exclusiveMinimum,
		set: func(v any) error { return set(v.(float64)) }}
}

// argList declares the arguments of one tool.
type argList struct {
	tool string
	// example is a valid set of arguments, shown when none came.
	example string
	params  []param
}

// argSchema is the JSON Schema of the arguments in l.
func argSchema(l argList) json.RawMessage {
	props := map[string]any{}
	var required []string
	for _, p := range l.params {
		prop := map[string]any{"type": p.jsonType, "description": p.description}
		for k, v := range p.schema {
			prop[k] = v
		}
		if p.exclusiveMinimum != nil {
			prop["exclusiveMinimum"] = *p.exclusiveMinimum
		}
		props[p.name] = prop
		if p.required {
			required = append(required, p.name)
		}
	}
	schema := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		schema["required"] = required
	}
	b, err := json.Marshal(schema)
	if err != nil {
		panic("server: the argument schema of " + l.tool + " does not encode: " + err.Error())
	}
	return b
}

// names lists the names of the params for which keep is true.
func (l argList) names(keep func(param) bool) []string {
	var out []string
	for _, p := range l.params {
		if keep(p) {
			out = append(out, p.name)
		}
	}
	return out
}

// decodeArgs checks raw, the "arguments" a client sent (normally a map from
// JSON decoding), against l and stores each argument with its param's set,
// in the order of l. Every failure is an *ArgError naming the argument and
// what to do.
func decodeArgs(raw any, l argList) error {
	raw, err := decodeRaw(raw)
	if len(l.params) == 0 {
		if m, ok := raw.(map[string]any); err != nil || (raw != nil && (!ok || len(m) > 0)) {
			return argErr("%s takes no arguments: call it with {}", l.tool)
		}
		return nil
	}
	if err != nil {
		return err
	}
	all := l.names(func(param) bool { return true })
	required := l.names(func(p param) bool { return p.required })
	m, ok := raw.(map[string]any)
	if raw == nil {
		return argErr("%s needs arguments: send %s", l.tool, l.example)
	}
	if !ok {
		return argErr("%s arguments must be a JSON object with %s, not %s", l.tool, joinAnd(required), jsonType(raw))
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(all, k) {
			unknown = append(unknown, fmt.Sprintf("%q", truncateRunes(k, 40)))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return argErr("unknown argument %s: %s takes %s", strings.Join(unknown, ", "), l.tool, joinAnd(all))
	}
	for _, p := range l.params {
		v, ok := m[p.name]
		if !ok || v == nil {
			if p.required {
				return argErr("missing required argument %q: %s needs %s", p.name, l.tool, joinAnd(required))
			}
			continue
		}
		switch p.jsonType {
		case "string":
			s, ok := v.(string)
			if !ok {
				return argErr("%s must be %s, not %s", p.name, p.expected, jsonType(v))
			}
			v = s
		case "number":
			n, ok := number(v)
			if !ok {
				return argErr("%s must be %s, not %s", p.name, p.expected, jsonType(v))
			}
			v = n
		case "array":
			a, ok := v.([]any)
			if !ok {
				return argErr("%s must be %s, not %s", p.name, p.expected, jsonType(v))
			}
			v = a
		}
		if err := p.set(v); err != nil {
			return err
		}
	}
	return nil
}

// joinAnd writes names as "a, b and c".
func joinAnd(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// ExecuteArgs are the decoded, validated arguments of code_execute.
type ExecuteArgs struct {
	Language string
	Code     string
	Stdin    string
	Timeout  time.Duration
	// SessionID names the session to run in ("" for a run of its own).
	SessionID string
	// Files are checked and decoded (artifacts.Decode).
	Files []artifacts.Input
	// Packages are checked and normalized (packages.Parse).
	Packages []string
}

// ArgError is a request the server rejects: its message is one sentence the
// model can act on.
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return e.Msg }

func argErr(format string, a ...any) *ArgError { return &ArgError{Msg: fmt.Sprintf(format, a...)} }

// executeArgs declares code_execute's arguments, checked against the
// operator's limits in o and stored in a.
func executeArgs(a *ExecuteArgs, o *Options) argList {
	l := argList{tool: ToolExecute, example: `{"language": "python", "code": "print(2**64)"}`, params: []param{
		stringParam("language", "Language of the code: python, javascript or bash (aliases: py, python3, js, node, sh).", true, func(lang string) error {
			canon, err := sandbox.CanonicalLanguage(lang)
			if err != nil || !slices.Contains(o.Languages, canon) {
				return argErr("language %q is not supported here: use one of %s", truncateRunes(lang, 40), strings.Join(o.Languages, ", "))
			}
			a.Language = canon
			return nil
		}),
		stringParam("code", "The program text. Print what you want to see: only stdout and stderr come back.", true, func(code string) error {
			switch {
			case strings.TrimSpace(code) == "":
				return argErr("code is empty: send the program text to run")
			case int64(len(code)) > o.MaxCode:
				return argErr("code is %d bytes, over this server's limit of %d bytes (CODE_EXEC_MAX_CODE): send a shorter program", len(code), o.MaxCode)
			case strings.IndexByte(code, 0) >= 0:
				return argErr("code contains a NUL byte, which no interpreter accepts in program text: remove it")
			case !utf8.ValidString(code):
				return argErr("code is not valid UTF-8: send the program as text")
			}
			a.Code = code
			return nil
		}),
		stringParam("stdin", "Standard input for the program (optional).", false, func(stdin string) error {
			if int64(len(stdin)) > o.MaxStdin {
				return argErr("stdin is %d bytes, over this server's limit of %d bytes (CODE_EXEC_MAX_STDIN)", len(stdin), o.MaxStdin)
			}
			a.Stdin = stdin
			return nil
		}),
		numberParam("timeout_seconds", "Wall-clock limit for this run in seconds (optional; the server's default applies otherwise, and its cap may not be exceeded: see sandbox_info).",
			"a number of seconds", 0, func(secs float64) error {
				maxSecs := o.MaxTimeout.Seconds()
				switch {
				case math.IsNaN(secs) || secs <= 0:
					return argErr("timeout_seconds must be above 0 (at most %s)", fmtSeconds(maxSecs))
				case secs > maxSecs:
					return argErr("timeout_seconds %s is above this server's cap of %s seconds (CODE_EXEC_MAX_TIMEOUT): ask for at most %s", fmtSeconds(secs), fmtSeconds(maxSecs), fmtSeconds(maxSecs))
				case secs < 0.001:
					return argErr("timeout_seconds %s is too short to run anything: ask for at least 0.001", fmtSeconds(secs))
				}
				a.Timeout = time.Duration(secs * float64(time.Second))
				return nil
			}),
		filesParam(func(files []artifacts.File) error {
			if len(files) == 0 {
				return nil
			}
			if o.Files.MaxFiles <= 0 {
				return argErr("files are turned off on this server (CODE_EXEC_MAX_FILES=0): put the data in the code or in stdin instead")
			}
			in, err := artifacts.Decode(files, o.Files)
			if err != nil {
				return argErr("%s", filesErrorMessage(err))
			}
			a.Files = in
			return nil
		}),
		packagesParam(o, &a.Language, func(specs []string) { a.Packages = specs }),
	}}
	if o.Sessions != nil {
		l.params = append(l.params, sessionIDParam("Run in this session (from session_create): its files and, for python and javascript, its variables persist between calls (optional; without it the run starts from a clean slate).", false, &a.SessionID))
	}
	return l
}

// DecodeExecuteArgs checks the raw arguments of code_execute against their
// declaration and the operator's limits in o. raw is what the client sent as
// "arguments" (normally a map from JSON decoding). Every failure is an
// *ArgError naming the argument and what to do.
func DecodeExecuteArgs(raw any, o Options) (ExecuteArgs, error) {
	a := ExecuteArgs{Timeout: o.Limits.Timeout}
	err := decodeArgs(raw, executeArgs(&a, &o))
	return a, err
}

// infoArgs declares sandbox_info's arguments: none.
var infoArgs = argList{tool: ToolInfo}

// decodeRaw turns arguments that arrive as raw JSON into Go values.
func decodeRaw(raw any) (any, error) {
	var b []byte
	switch r := raw.(type) {
	case json.RawMessage:
		b = r
	case []byte:
		b = r
	default:
		return raw, nil
	}
	if len(b) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, argErr("the arguments are not valid JSON: %v", err)
	}
	return v, nil
}

// number accepts the numeric types JSON decoding produces.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, float32, int, int64, json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func fmtSeconds(s float64) string {
	if math.IsInf(s, 0) || math.Abs(s) > 1e12 {
		return fmt.Sprintf("%.3g", s)
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", s), "0"), ".")
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
