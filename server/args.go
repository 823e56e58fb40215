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
)

// ExecuteArgs are the decoded, validated arguments of code_execute.
type ExecuteArgs struct {
	Language string
	Code     string
	Stdin    string
	Timeout  time.Duration
}

// ArgError is a request the server rejects: its message is one sentence the
// model can act on.
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return e.Msg }

func argErr(format string, a ...any) *ArgError { return &ArgError{Msg: fmt.Sprintf(format, a...)} }

var executeArgNames = []string{"language", "code", "stdin", "timeout_seconds"}

// DecodeExecuteArgs checks the raw arguments of code_execute against the
// schema and the operator's limits in o. raw is what the client sent as
// "arguments" (normally a map from JSON decoding). Every failure is an
// *ArgError naming the argument and what to do.
func DecodeExecuteArgs(raw any, o Options) (ExecuteArgs, error) {
	var a ExecuteArgs
	raw, err := decodeRaw(raw)
	if err != nil {
		return a, err
	}
	m, ok := raw.(map[string]any)
	if raw == nil {
		return a, argErr("code_execute needs arguments: send {\"language\": \"python\", \"code\": \"print(2**64)\"}")
	}
	if !ok {
		return a, argErr("code_execute arguments must be a JSON object with language and code, not %s", jsonType(raw))
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(executeArgNames, k) {
			unknown = append(unknown, fmt.Sprintf("%q", truncateRunes(k, 40)))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return a, argErr("unknown argument %s: code_execute takes language, code, stdin and timeout_seconds", strings.Join(unknown, ", "))
	}

	lang, err := stringArg(m, "language", true)
	if err != nil {
		return a, err
	}
	enabled := o.Languages
	canon, cerr := sandbox.CanonicalLanguage(lang)
	if cerr != nil || !slices.Contains(enabled, canon) {
		return a, argErr("language %q is not supported here: use one of %s", truncateRunes(lang, 40), strings.Join(enabled, ", "))
	}
	a.Language = canon

	if a.Code, err = stringArg(m, "code", true); err != nil {
		return a, err
	}
	if strings.TrimSpace(a.Code) == "" {
		return a, argErr("code is empty: send the program text to run")
	}
	if n := len(a.Code); int64(n) > o.MaxCode {
		return a, argErr("code is %d bytes, over this server's limit of %d bytes (CODE_EXEC_MAX_CODE): send a shorter program", n, o.MaxCode)
	}
	if strings.IndexByte(a.Code, 0) >= 0 {
		return a, argErr("code contains a NUL byte, which no interpreter accepts in program text: remove it")
	}
	if !utf8.ValidString(a.Code) {
		return a, argErr("code is not valid UTF-8: send the program as text")
	}

	if a.Stdin, err = stringArg(m, "stdin", false); err != nil {
		return a, err
	}
	if n := len(a.Stdin); int64(n) > o.MaxStdin {
		return a, argErr("stdin is %d bytes, over this server's limit of %d bytes (CODE_EXEC_MAX_STDIN)", n, o.MaxStdin)
	}

	a.Timeout = o.Limits.Timeout
	if v, present := m["timeout_seconds"]; present && v != nil {
		secs, ok := number(v)
		maxSecs := o.MaxTimeout.Seconds()
		switch {
		case !ok:
			return a, argErr("timeout_seconds must be a number of seconds, not %s", jsonType(v))
		case math.IsNaN(secs) || secs <= 0:
			return a, argErr("timeout_seconds must be above 0 (at most %s)", fmtSeconds(maxSecs))
		case secs > maxSecs:
			return a, argErr("timeout_seconds %s is above this server's cap of %s seconds (CODE_EXEC_MAX_TIMEOUT): ask for at most %s", fmtSeconds(secs), fmtSeconds(maxSecs), fmtSeconds(maxSecs))
		case secs < 0.001:
			return a, argErr("timeout_seconds %s is too short to run anything: ask for at least 0.001", fmtSeconds(secs))
		}
		a.Timeout = time.Duration(secs * float64(time.Second))
	}
	return a, nil
}

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

// stringArg returns m[key] as a string. A missing optional argument (or an
// explicit null) is "".
func stringArg(m map[string]any, key string, required bool) (string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			return "", argErr("missing required argument %q: code_execute needs language and code", key)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", argErr("%s must be a string, not %s", key, jsonType(v))
	}
	return s, nil
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
