// Package pypolicy is restricted Python: a language-level policy layered on
// top of a sandbox, never instead of it.
//
// Wrap returns a sandbox.Runner that, for python requests, replaces the
// program with a bootstrap (bootstrap.py, embedded) that carries the program
// and the Policy. Inside the sandbox, in the interpreter that then runs the
// program and before its first line, the bootstrap parses the program, caps
// its size, walks its syntax tree and refuses what the policy forbids
// (imports beyond the allowed ones, open/eval/exec/compile/globals/locals/
// vars/breakpoint, dunder attributes, frame and generator internals, format
// fields that walk to such attributes, ...), then runs it with curated
// builtins, a guarded importer and guarded gadgets of the allowed modules. A
// refusal is an *Error (errors.Is(err, ErrPolicy)) whose message names the
// rule and the line in one sentence.
//
// A bypass of this layer reaches only the sandbox it runs in: the sandbox
// mode decides what the program can touch; the policy decides which Python
// the program may be written in.
package pypolicy

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
)

// Name is the value of CODE_EXEC_PYTHON_POLICY that turns the layer on.
const Name = "restricted"

// ProtectionName is the name of the protection the wrapped Runner lists in
// its Capabilities.
const ProtectionName = "restricted python"

// DefaultAllowedImports are the modules a restricted program may import
// unless the operator says otherwise.
var DefaultAllowedImports = []string{"datetime", "calendar", "re", "math", "decimal", "fractions",
	"statistics", "collections", "itertools", "functools", "operator", "json"}

// DefaultMaxASTNodes is the default cap on the program's syntax-tree nodes.
const DefaultMaxASTNodes = 20000

// MaxSourceBytes caps the program text the policy checks.
const MaxSourceBytes = 256 << 10

// Defeating lists modules that would let a program around the policy: they
// hand out the interpreter itself (frames, the module table, code objects,
// raw memory, arbitrary imports), evaluate strings as code that the check
// never sees (typing's forward references, dataclasses, timeit, the
// profilers, doctest, rlcompleter), resolve dotted names into modules
// (logging.config, pydoc) or walk attributes named in unchecked format
// strings (logging's "{" style). ValidateImports refuses them.
var Defeating = []string{"builtins", "sys", "importlib", "inspect", "gc", "ctypes", "types", "code", "codeop",
	"runpy", "pickle", "_pickle", "marshal", "copyreg", "pkgutil", "zipimport", "imp", "traceback", "threading",
	"_thread", "os", "posix", "io", "_io", "subprocess", "multiprocessing", "pty", "socket", "signal", "weakref",
	"ast", "dis", "linecache", "abc", "typing", "dataclasses", "unittest", "pdb", "bdb", "site", "sysconfig",
	"faulthandler", "tracemalloc", "asyncio", "concurrent", "shelve", "dbm", "pathlib", "shutil", "tempfile", "glob",
	"logging", "timeit", "profile", "cProfile", "trace", "doctest", "pydoc", "rlcompleter"}

// Imports are the modules the bootstrap imports before it checks the
// program: every restricted run imports them. A sandbox that starts its
// interpreters ahead of their runs (process mode) may import them then.
var Imports = []string{"_ast", "_string", "binascii", "builtins", "collections", "enum", "functools", "importlib",
	"linecache", "operator", "os", "string", "sys", "types", "unicodedata"}

// Prelude is the text every restricted program begins with: the
// bootstrap, before the line that calls it with the program and the
// policy. A sandbox that starts its interpreters ahead of their runs
// (process mode) may compile it then.
func Prelude() string { return bootstrap }

// exitStatus is the bootstrap's exit status on a refusal.
const exitStatus = 120

//go:embed bootstrap.py
var bootstrap string

// Policy is what a restricted program may do.
type Policy struct {
	// AllowedImports are the top-level modules a program may import
	// (directly, or through __import__). Empty means none.
	AllowedImports []string
	// MaxASTNodes caps the program's syntax-tree nodes (0 means
	// DefaultMaxASTNodes).
	MaxASTNodes int
}

var moduleName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// ValidateImports checks that every module of imports is a plain top-level
// module name and none is in Defeating.
func ValidateImports(imports []string) error {
	for _, m := range imports {
		if !moduleName.MatchString(m) {
			return fmt.Errorf("%q is not a top-level module name (letters, digits and _, not starting with _ or a digit)", m)
		}
		if slices.Contains(Defeating, m) {
			return fmt.Errorf("the module %q would let programs around the policy (it hands out the interpreter, frames, code objects or code that the check never sees): use CODE_EXEC_PYTHON_POLICY=standard if programs need it", m)
		}
	}
	return nil
}

func (p Policy) maxNodes() int {
	if p.MaxASTNodes <= 0 {
		return DefaultMaxASTNodes
	}
	return p.MaxASTNodes
}

// Describe says in one line what the policy allows, for sandbox_info and
// the start-up log.
func (p Policy) Describe() string {
	imports := "none"
	if len(p.AllowedImports) > 0 {
		imports = strings.Join(p.AllowedImports, ", ")
	}
	return fmt.Sprintf("python code is checked and run under the restricted policy inside the sandbox, before its first line: "+
		"imports allowed: %s; no open, eval, exec, compile, globals, locals, vars, breakpoint, dunder attributes "+
		"(also through format strings), class-hierarchy or frame internals, getattr-family calls with non-public names, "+
		"string annotations, positional sub-patterns in match class patterns but for builtins; "+
		"at most %d syntax-tree nodes and %d KiB of source; a layer on top of the sandbox, not instead of it",
		imports, p.maxNodes(), MaxSourceBytes>>10)
}

// ErrPolicy is matched (errors.Is) by every *Error.
var ErrPolicy = errors.New("refused by the restricted Python policy")

// Error is a program the policy refused: before it ran (the check) or while
// it ran (a guarded builtin or module function).
type Error struct {
	// Rule names the rule, such as "import", "banned-name",
	// "dunder-attribute", "format-field", "attribute-name".
	Rule string
	// Line is the program's line (0 when the rule is about the whole
	// program, such as its size).
	Line int
	// Detail says what was refused.
	Detail string
	// Result is the run up to the refusal: what the program printed before
	// a refusal at run time (nothing for one before its first line).
	Result *sandbox.Result
}

// Error is one sentence naming the line, what was refused and the rule.
func (e *Error) Error() string {
	where := "the program"
	if e.Line > 0 {
		where = "line " + strconv.Itoa(e.Line)
	}
	return fmt.Sprintf("The restricted Python policy refused %s: %s (rule %s); rewrite the code without it, see sandbox_info for what is allowed.",
		where, strings.TrimSuffix(e.Detail, "."), e.Rule)
}

// Is makes errors.Is(err, ErrPolicy) hold.
func (e *Error) Is(target error) bool { return target == ErrPolicy }

// Runner is the restricted-Python decorator of a sandbox.Runner.
type Runner struct {
	next   sandbox.Runner
	policy Policy
}

var _ sandbox.Runner = (*Runner)(nil)

// Wrap returns next with the policy applied to python requests; other
// languages pass through untouched. Closing the returned Runner closes next.
// Its AllowedImports should have passed ValidateImports.
func Wrap(next sandbox.Runner, p Policy) *Runner {
	p.AllowedImports = slices.Clone(p.AllowedImports)
	return &Runner{next: next, policy: p}
}

// Policy returns the policy in force.
func (r *Runner) Policy() Policy { return r.policy }

// Run runs req. A python program runs under the bootstrap; when the policy
// refuses it, Run returns an *Error (and no Result). Everything else (a
// non-zero exit, a limit, a sandbox error) is what the next Runner says.
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if req.Language != "python" {
		return r.next.Run(ctx, req)
	}
	nonce, err := newNonce()
	if err != nil {
		return nil, fmt.Errorf("restricted python: %w", err)
	}
	wrapped := req
	wrapped.Code = r.program(req.Code, nonce)
	res, err := r.next.Run(ctx, wrapped)
	if err != nil || res == nil {
		return res, err
	}
	if perr := extract(res, nonce); perr != nil {
		return nil, perr
	}
	return res, nil
}

// Capabilities are next's, with the policy listed among the protections.
// It is active when python can run (the bootstrap needs Python 3.8 or
// later).
func (r *Runner) Capabilities() sandbox.Capabilities {
	caps := r.next.Capabilities()
	caps.Protections = append(slices.Clone(caps.Protections), r.protection(caps))
	return caps
}

func (r *Runner) protection(caps sandbox.Capabilities) sandbox.Protection {
	p := sandbox.Protection{Name: ProtectionName, Detail: r.policy.Describe()}
	st, ok := caps.Language("python")
	switch {
	case !ok || !st.Available:
		p.Detail = "python cannot run here, so the restricted policy has nothing to apply to"
	case !supported(st.Version):
		p.Detail = "the restricted policy needs Python 3.8 or later, and the interpreter is " + st.Version
	default:
		p.Active = true
	}
	return p
}

// supported reports whether a Python version (3.11.2) runs the bootstrap.
func supported(version string) bool {
	major, rest, _ := strings.Cut(version, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	return err1 == nil && err2 == nil && (ma > 3 || ma == 3 && mi >= 8)
}

// Close closes next.
func (r *Runner) Close() error { return r.next.Close() }

// program is the bootstrap with the call that carries code and the policy:
// its payload is base64 (which no python string literal can break out of)
// of the fields nonce, node cap, source cap, allowed imports (module names
// hold no comma or NUL: ValidateImports) and last code, NUL-separated. The
// bootstrap reads them with binascii, not json: no run needs json
// otherwise.
func (r *Runner) program(code, nonce string) string {
	fields := strings.Join([]string{nonce, strconv.Itoa(r.policy.maxNodes()), strconv.Itoa(MaxSourceBytes),
		strings.Join(r.policy.AllowedImports, ","), code}, "\x00")
	return bootstrap + "_codeexec_policy(\"" + base64.StdEncoding.EncodeToString([]byte(fields)) + "\")\n"
}

func newNonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// extract finds the bootstrap's refusal line in res.Stderr: it must carry
// this run's nonce (the program cannot know it) and the run must have
// ended with the bootstrap's exit status. The line is removed from the
// Result kept in the Error.
func extract(res *sandbox.Result, nonce string) *Error {
	if res.ExitCode != exitStatus {
		return nil
	}
	marker := "\ncodeexec-policy:" + nonce + " "
	i := strings.LastIndex(res.Stderr, marker)
	if i < 0 {
		return nil
	}
	line, _, _ := strings.Cut(res.Stderr[i+len(marker):], "\n")
	var v struct {
		Rule   string `json:"rule"`
		Line   int    `json:"line"`
		Detail string `json:"detail"`
	}
	if err := json.NewDecoder(bytes.NewReader([]byte(line))).Decode(&v); err != nil || v.Rule == "" {
		return nil
	}
	kept := *res
	kept.Stderr = res.Stderr[:i]
	return &Error{Rule: v.Rule, Line: v.Line, Detail: v.Detail, Result: &kept}
}
