// Package sandbox defines the contract between codeexec's MCP server and the
// backends that run code: a Runner takes a Request and returns a Result.
//
// The backends are sibling packages with the same shape: sandbox/docker (a
// fresh container per run), sandbox/kube (a fresh pod per run on a
// Kubernetes cluster, with docker mode's containment), sandbox/process (a
// child process with rlimits and its own process group) and sandbox/host
// (mode none: no isolation).
// Cross-cutting behaviour such as the concurrency limit or human approval wraps
// a Runner in another Runner (see Limit).
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// Mode names a sandbox backend. The values are the accepted values of
// CODE_EXEC_SANDBOX.
type Mode string

// The sandbox modes.
const (
	ModeDocker     Mode = "docker"
	ModeProcess    Mode = "process"
	ModeNone       Mode = "none"
	ModeKubernetes Mode = "kubernetes"
)

// Modes lists every mode in the order the documentation gives them.
var Modes = []Mode{ModeDocker, ModeProcess, ModeNone, ModeKubernetes}

// ParseMode returns the Mode named s, in any case (Docker is docker), or an
// error that lists the accepted values.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == strings.ToLower(strings.TrimSpace(s)) {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown sandbox mode %q (accepted: docker, process, none, kubernetes)", s)
}

// UnmarshalText implements encoding.TextUnmarshaler so that configuration
// parsing rejects an unknown mode.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Runner executes one request to completion.
//
// A program that ran and exited, whatever its exit code, is a Result with a
// nil error. Limits that stop a run (timeout, memory, output) are reported in
// the Result too (TimedOut, OOMKilled, Truncated). An error means the request
// could not be run at all: it wraps one of the sentinel errors below where one
// applies. Cancelling ctx kills the workload; Run then returns ctx's error
// (possibly with a partial Result) only after everything the run started has
// been stopped and cleaned up.
//
// Run is safe for concurrent use. Close releases the runner's resources and
// stops any run still in flight; it is safe to call more than once.
type Runner interface {
	Run(ctx context.Context, req Request) (*Result, error)
	Capabilities() Capabilities
	Close() error
}

// Request is one piece of code to run.
type Request struct {
	// Language is a canonical language name (see Languages).
	Language string
	// Code is the program text.
	Code string
	// Stdin is given to the program as its standard input.
	Stdin string
	// Limits bounds the run. The server fills it from the operator's
	// configuration and the request's own (capped) timeout.
	Limits Limits
	// Observe, if not nil, sees the program's output while it runs (see
	// Output.Observe); runners pass it to their Output. It changes nothing
	// in the Result.
	Observe ObserveFunc
	// Files are written into the run's working directory before the program
	// starts, in every mode. They come checked and decoded by
	// artifacts.Decode; a runner refuses a file that would replace the
	// program file (see CheckFiles).
	Files []artifacts.Input
	// Artifacts, when not nil, asks for the files that the program created
	// or changed in its working directory, within these caps: they come
	// back in Result.Artifacts. Nil collects nothing.
	Artifacts *artifacts.Options
	// Packages are the package specs the request asked for (pip
	// requirement specifiers for python, npm specs for javascript), as
	// normalized by sandbox/packages: what an approver is shown. Runners
	// do not read it: the packages layer (sandbox/packages) installs them
	// and sets PackageDir.
	Packages []string
	// PackageDir, when not nil, is a host folder of installed packages
	// that the run sees at PackagesPath (or at its own path where the
	// sandbox cannot move it): read-only for a run, writable for the
	// install phase. Only codeexec's own layers set it, never a client.
	PackageDir *PackageDir
	// Session names the session (sandbox/sessions) that the request runs
	// in: the session router (sessions.Router) runs it there on behalf of
	// its caller (CallerFrom), who must own that session. Empty runs the
	// request on its own, from a clean slate.
	Session string
	// Network, when not nil, narrows what the run may reach through the
	// egress proxy (CODE_EXEC_NETWORK=allowlist) to the destinations that
	// are on both the operator's allowlist and this one: an empty one
	// refuses every destination. Nil leaves the operator's allowlist.
	// Every mode with an egress proxy applies it to the run's proxy
	// session (proxy.Session.Restrict) before the program starts. Only
	// codeexec's own layers set it (a principal's network policy), never
	// a client.
	Network *egress.Allowlist
	// Env is more of the program's environment, NAME=value each, added
	// after the mode's own (in a one-off run; sessions do not take it).
	// Only codeexec's own layers set it (the run token), never a client;
	// a mode that passes it says so in Capabilities.RunEnv (docker mode
	// creates the run's container with it, process mode and mode none
	// start the program with it; kubernetes mode does not yet).
	Env []string
	// NewSession, when not nil, makes the request one that runs no code:
	// it asks for a session of Language whose calls can import Packages
	// (session_create with packages), which is approved and recorded like
	// a run. The session router creates the session and names it in
	// Result.Session; the layers that only concern runs (metrics, run
	// slots) let such a request by (see RunsCode).
	NewSession *NewSession
}

// WithEnv returns env (NAME=value each) with the variables of extra added,
// each replacing any variable of the same name in env, so that a program
// sees extra's value whichever of two equal names it would read: how a
// mode adds a Request's Env to its own.
func WithEnv(env, extra []string) []string {
	if len(extra) == 0 {
		return env
	}
	names := map[string]bool{}
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		names[name] = true
	}
	out := make([]string, 0, len(env)+len(extra))
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); !names[name] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// NewSession is what a request that creates a session asks for besides
// its Language, Packages and Limits (see Request.NewSession).
type NewSession struct {
	// IdleTimeout, if above 0, is the session's own idle timeout (the
	// server's, if it is shorter).
	IdleTimeout time.Duration
	// Quota caps the sessions of the caller's group (see SessionQuota).
	Quota SessionQuota
}

// SessionQuota caps the sessions of a group of owners, such as a
// principal's whatever MCP client made them: at most Max of the sessions
// created with Key exist, or are being started, at once (besides the
// server's CODE_EXEC_MAX_SESSIONS). The zero value (no Key) caps nothing.
// Setting names the limit in the error, as the operator wrote it.
type SessionQuota struct {
	Key     string
	Max     int
	Setting string
}

// RunsCode reports whether req runs code: every request does but one that
// creates a session (NewSession).
func (req Request) RunsCode() bool { return req.NewSession == nil }

// PackageDir is a host folder of installed packages given to one run.
type PackageDir struct {
	// HostDir is the folder on the host (absolute).
	HostDir string
	// Writable is set for the install phase only.
	Writable bool
}

// PackagesPath is where runs see their PackageDir when the sandbox can put
// it there (docker mode, process mode with a mount namespace).
const PackagesPath = "/packages"

// PackagesVariable names the environment variable that tells a program (and
// the install phase) where its PackageDir is: codeexec's python start-up
// code puts it on sys.path (python itself starts with -I, which ignores
// PYTHONPATH; see python.go). For python, PYTHONPATH names it too, for the
// program's own python subprocesses; for javascript, NODE_PATH names its
// node_modules folder.
const PackagesVariable = "CODEEXEC_PACKAGES"

// PackageEnv is the environment that lets lang's programs import the
// packages installed in dir, the path where the run sees its PackageDir.
func PackageEnv(lang, dir string) []string {
	env := []string{PackagesVariable + "=" + dir}
	switch lang {
	case "python":
		env = append(env, "PYTHONPATH="+dir)
	case "javascript":
		env = append(env, "NODE_PATH="+dir+"/node_modules")
	}
	return env
}

// Limits are the resource limits of one run. A zero value means "no limit of
// this kind" to a runner, but the server always fills every field.
type Limits struct {
	// Timeout is the wall-clock limit of the run.
	Timeout time.Duration
	// MemoryBytes limits memory (container memory in docker mode, the
	// address space in process mode).
	MemoryBytes int64
	// CPUs limits CPU bandwidth in docker mode and CPU time (CPUs × Timeout)
	// in process mode.
	CPUs float64
	// Processes limits the number of processes/threads.
	Processes int
	// OpenFiles limits open file descriptors per process.
	OpenFiles int
	// FileSizeBytes limits the size of any file the program writes (and the
	// size of /tmp in docker mode).
	FileSizeBytes int64
	// OutputBytes caps stdout and stderr together; a program that writes
	// more is stopped and its Result is Truncated.
	OutputBytes int64
}

// Result is the outcome of a run that started.
type Result struct {
	// ExitCode is the program's exit status; a program killed by a signal
	// has 128+signal, as in a shell.
	ExitCode int
	// Stdout and Stderr hold what the program wrote, up to the output cap,
	// as valid UTF-8 (invalid bytes become U+FFFD).
	Stdout string
	Stderr string
	// TimedOut is set when the wall-clock limit stopped the run.
	TimedOut bool
	// OOMKilled is set when the memory limit stopped the run.
	OOMKilled bool
	// Truncated is set when the output cap was reached and the run stopped.
	Truncated bool
	// Signal names the signal that ended the program, if any (for example "killed").
	Signal string
	// Duration is the wall-clock time of the run.
	Duration time.Duration
	// Sandbox is the mode that ran it.
	Sandbox Mode
	// Network reports what the run reached and what was refused, when
	// runs reach the network through codeexec's egress proxy
	// (CODE_EXEC_NETWORK=allowlist); nil otherwise.
	Network *egress.Report
	// StateLost is set, for a call in a session (see sandbox/sessions),
	// when the call ended the session's interpreter (a timeout, the memory
	// or output limit, a crash): the variables of earlier calls are gone,
	// the files stay, and the next call starts a fresh interpreter.
	StateLost bool
	// Artifacts are the files that the program created or changed in its
	// working directory, when the request asked for them (and the run got
	// as far as its end); nil otherwise.
	Artifacts *artifacts.Collection
	// Packages reports the packages the run imported from, when the
	// request named some (set by sandbox/packages); nil otherwise.
	Packages *PackagesReport
	// Session names the session that a request with NewSession created.
	Session string
}

// PackagesReport says which packages a run had and where they came from.
type PackagesReport struct {
	// List is the normalized list (see sandbox/packages.Parse).
	List []string `json:"list"`
	// Cached: the list came from the cache; otherwise it was installed
	// for this run, which took InstallMS.
	Cached    bool    `json:"cached"`
	InstallMS float64 `json:"install_ms,omitempty"`
}

// CheckFiles refuses, with an error wrapping artifacts.ErrInvalidFile, a
// file that would replace the program file of lang (main.py for python, and
// so on), which every mode keeps in the working directory.
func CheckFiles(lang string, files []artifacts.Input) error {
	spec, ok := Languages[lang]
	if !ok {
		return nil
	}
	for i, f := range files {
		if f.Path == spec.FileName {
			return &artifacts.FileError{Index: i, Path: f.Path, Reason: fmt.Sprintf("is the name of the %s program file; give the file another name", lang)}
		}
	}
	return nil
}

// Workspace is a host folder that every run can see
// (CODE_EXEC_WORKSPACE, CODE_EXEC_WORKSPACE_MODE).
type Workspace struct {
	// Dir is the folder on the host (absolute).
	Dir string
	// Writable lets runs change it; otherwise it is read-only to them.
	Writable bool
}

// WorkspacePath is where runs see the workspace when the sandbox can put it
// there: in docker mode, and in process mode with a mount namespace.
const WorkspacePath = "/workspace"

// WorkspaceVariable is the environment variable that tells a program where
// the workspace is.
const WorkspaceVariable = "WORKSPACE"

// WorkspaceStatus says how runs see the workspace on this host.
type WorkspaceStatus struct {
	// Path is where runs see it (WorkspacePath, or the host folder itself
	// where the sandbox cannot move it).
	Path string `json:"path" jsonschema:"where runs see it; the WORKSPACE variable says so too"`
	// HostDir is the folder on the host.
	HostDir string `json:"host_dir"`
	// Writable: runs may change it.
	Writable bool `json:"writable"`
	// Enforced: read-only really is read-only for runs (always true when
	// Writable).
	Enforced bool `json:"enforced" jsonschema:"read-only really is read-only for runs"`
	// Detail says how it is made visible and protected.
	Detail string `json:"detail,omitempty"`
}

// Package is a package that a language's programs can import.
type Package struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Version is the installed version, when known.
	Version string `json:"version,omitempty"`
}

// LimitHit returns a short description of the limit that stopped the run, or
// "" when the program ran to completion by itself.
func (r *Result) LimitHit() string {
	switch {
	case r.TimedOut:
		return "timeout"
	case r.OOMKilled:
		return "memory"
	case r.Truncated:
		return "output"
	}
	return ""
}

// Capabilities describe what a runner offers and which protections it
// actually has in force on this host. They are data, checked at start, never
// assumed.
type Capabilities struct {
	Mode Mode
	// Isolation declares, boundary by boundary, what keeps a run from the
	// host. Callers decide from it, never from Mode or from the names of
	// Protections.
	Isolation Isolation
	// Summary says in a few words what separates a run from the host.
	Summary string
	// Languages lists every language the server knows, available or not.
	Languages []LanguageStatus
	// Protections lists each protection, in the backend's own words, with
	// whether it is active: what an operator reads.
	Protections []Protection
	// Warnings are things the operator must know (for example that mode
	// none runs code unsandboxed).
	Warnings []string
	// Egress describes the network allowlist when runs reach the network
	// through codeexec's egress proxy (CODE_EXEC_NETWORK=allowlist); nil
	// when they have no network (or, in mode none, the host's).
	Egress *egress.PolicyInfo
	// Workspace says how runs see the operator's project folder; nil when
	// there is none.
	Workspace *WorkspaceStatus
	// RunEnv: the runner gives a one-off run's Request.Env to its program.
	RunEnv bool
}

// Isolation declares which boundaries hold between a run and the host on
// this host, as checked at start. A boundary that does not hold is open: the
// program reaches that part of the host like any program of the server's
// user. Every backend declares the same fields, so that callers (tool
// annotations, sandbox_info) never infer isolation from the mode or from the
// free-text names of Protections.
type Isolation struct {
	// Network: the program cannot reach the network, the host's services
	// or DNS; at most a loopback of its own and, when Capabilities.Egress
	// is set, codeexec's egress proxy, through which it reaches the
	// allowed destinations and nothing else.
	Network bool `json:"network"`
	// Filesystem: the program sees the system's files read-only and its
	// own run directory, and nothing else of the host's files.
	Filesystem bool `json:"filesystem"`
	// Identity: the program runs as an unprivileged user and holds no
	// capability: never as root, and never as the server's user outside a
	// user namespace (inside one, the host may still see the server's uid).
	Identity bool `json:"identity"`
	// Environment: nothing of the server's environment (secrets included)
	// reaches the program.
	Environment bool `json:"environment"`
	// Processes: the program can neither see nor signal processes outside
	// its run.
	Processes bool `json:"processes"`
}

// Any reports whether at least one boundary holds: whether runs are
// sandboxed at all.
func (i Isolation) Any() bool {
	return i.Network || i.Filesystem || i.Identity || i.Environment || i.Processes
}

// LanguageStatus tells whether a language can run, with which interpreter.
type LanguageStatus struct {
	Name        string `json:"name"`
	Available   bool   `json:"available"`
	Version     string `json:"version,omitempty"`
	Interpreter string `json:"interpreter,omitempty"`
	// Reason explains why an unavailable language cannot run.
	Reason string `json:"reason,omitempty"`
	// Packages are notable packages and whether programs can import them
	// (python: numpy, pandas, matplotlib, scipy), where the runner checked.
	Packages []Package `json:"packages,omitempty"`
}

// Protection is one isolation measure and whether it is in force.
type Protection struct {
	Name   string `json:"name"`
	Active bool   `json:"active"`
	Detail string `json:"detail,omitempty"`
}

// Language returns the status of the named canonical language, if known.
func (c Capabilities) Language(name string) (LanguageStatus, bool) {
	for _, l := range c.Languages {
		if l.Name == name {
			return l, true
		}
	}
	return LanguageStatus{}, false
}

// Active reports whether the protection called name is listed and active.
func (c Capabilities) Active(name string) bool {
	for _, p := range c.Protections {
		if p.Name == name {
			return p.Active
		}
	}
	return false
}

// Sentinel errors. Runners wrap them so that callers can test with errors.Is.
var (
	// ErrUnknownLanguage: the language is not one codeexec knows.
	ErrUnknownLanguage = errors.New("unknown language")
	// ErrLanguageUnavailable: the language is known but cannot run here
	// (interpreter missing or language disabled).
	ErrLanguageUnavailable = errors.New("language unavailable")
	// ErrSandboxUnavailable: the sandbox itself cannot run code now
	// (for example the Docker Engine is unreachable).
	ErrSandboxUnavailable = errors.New("sandbox unavailable")
	// ErrClosed: the runner was closed.
	ErrClosed = errors.New("runner closed")
)
