// Package configs holds codeexec's configuration: every setting is an
// environment variable CODE_EXEC_*, parsed with caarlos0/env, with a default,
// a description and the values it accepts. Load parses and validates; a bad
// value is an error that names the variable and the accepted values.
//
// A Config is plain data: the values of the settings, parsed and checked.
// The domain values they describe (limits, policies, the workspace) are
// built where they are used, in cmd/codeexec.
package configs

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/pypolicy"
	"github.com/codeexec/codeexec/server/httpserve"
)

// Prefix is the prefix of every codeexec environment variable.
const Prefix = "CODE_EXEC_"

// Transport names how MCP clients reach the server.
type Transport string

// The transports.
const (
	TransportStdio Transport = "stdio"
	TransportSSE   Transport = "sse"
	TransportHTTP  Transport = "http"
)

// UnmarshalText accepts stdio, sse and http (streamable HTTP).
func (t *Transport) UnmarshalText(b []byte) error {
	switch v := Transport(strings.ToLower(string(b))); v {
	case TransportStdio, TransportSSE, TransportHTTP:
		*t = v
		return nil
	case "streamable-http", "streamable_http", "streamablehttp":
		*t = TransportHTTP
		return nil
	}
	return fmt.Errorf("unknown transport %q", string(b))
}

// ByteSize is a number of bytes written like 256m, 64k, 1g or 1048576.
type ByteSize int64

// ParseByteSize reads a byte size: a whole number with an optional unit
// k, m, g (powers of 1024; kb/kib and so on are accepted too); see
// sandbox.ParseBytes.
func ParseByteSize(s string) (ByteSize, error) {
	n, err := sandbox.ParseBytes(s)
	return ByteSize(n), err
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *ByteSize) UnmarshalText(p []byte) error {
	v, err := ParseByteSize(string(p))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// String writes the size the way it is configured (256m).
func (b ByteSize) String() string {
	switch {
	case b != 0 && b%(1<<30) == 0:
		return fmt.Sprintf("%dg", b/(1<<30))
	case b != 0 && b%(1<<20) == 0:
		return fmt.Sprintf("%dm", b/(1<<20))
	case b != 0 && b%(1<<10) == 0:
		return fmt.Sprintf("%dk", b/(1<<10))
	}
	return strconv.FormatInt(int64(b), 10)
}

// UIDRange is a range of host user ids written FIRST-LAST (or one id).
type UIDRange struct {
	First, Last int
}

// UnmarshalText reads FIRST-LAST (or a single id). Which ids a range may
// hold is process mode's to say (process.UIDRange.Validate), where the
// range is built (cmd/codeexec).
func (r *UIDRange) UnmarshalText(b []byte) error {
	a, z, found := strings.Cut(strings.TrimSpace(string(b)), "-")
	if !found {
		z = a
	}
	first, err1 := strconv.Atoi(strings.TrimSpace(a))
	last, err2 := strconv.Atoi(strings.TrimSpace(z))
	if err1 != nil || err2 != nil {
		return fmt.Errorf("invalid uid range %q", string(b))
	}
	*r = UIDRange{First: first, Last: last}
	return nil
}

// String writes the range as configured.
func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Config is every setting of codeexec. The struct tags are the single source
// of the variable names, defaults, descriptions (help) and accepted values
// (accepted) that --help and docs/configuration.md show.
type Config struct {
	Sandbox   sandbox.Mode `env:"SANDBOX" envDefault:"process" accepted:"docker, process, none or kubernetes" help:"sandbox mode: docker (a fresh locked-down container per run, for untrusted code), process (a supervised child process with limits), none (no isolation, local development only), kubernetes (docker mode's containment, a fresh pod per run on a cluster)"`
	Transport Transport    `env:"TRANSPORT" envDefault:"stdio" accepted:"stdio, sse or http" help:"how MCP clients connect: stdio, sse (HTTP+SSE, protocol 2024-11-05) or http (streamable HTTP); the --transport flag overrides it"`
	Addr      string       `env:"ADDR" envDefault:"127.0.0.1:8080" accepted:"host:port" help:"listen address of the sse and http transports; an address other than loopback requires CODE_EXEC_AUTH_TOKEN or CODE_EXEC_PRINCIPALS_FILE; the --addr flag overrides it"`
	AuthToken string       `env:"AUTH_TOKEN" accepted:"a secret of at least 16 characters" help:"bearer token that HTTP clients must send (Authorization: Bearer ...); required to listen beyond loopback, unless CODE_EXEC_PRINCIPALS_FILE gives each client a token of its own; its clients are the principal default" secret:"true"`
	// PrincipalsFile is checked where it is loaded (server/principals).
	PrincipalsFile string        `env:"PRINCIPALS_FILE" accepted:"a path to a YAML file of principals (see docs/principals.md)" help:"the principals of the HTTP transports: each bearer token is someone (name, organisation, the SHA-256 of its token) with its own languages, network, files, packages, sessions, approval policy, timeout, memory, CPUs, concurrent runs and runs per minute, each within the server-wide setting it falls back to; reloaded on SIGHUP and when it changes (a bad file keeps the previous one); empty: stdio is the principal local, HTTP with CODE_EXEC_AUTH_TOKEN the principal default"`
	RunTokenKey    string        `env:"RUN_TOKEN_KEY" accepted:"a secret of at least 32 characters" help:"sign a short-lived token for each run, given to it in CODEEXEC_RUN_TOKEN: a JWT (HS256, this key) that names its principal, organisation, run id and expiry, for an API of yours to verify (codeexec token verify checks one); empty gives runs none" secret:"true"`
	RunTokenTTL    time.Duration `env:"RUN_TOKEN_TTL" envDefault:"5m" accepted:"a duration such as 5m (from 1s to 24h)" help:"how long a run token is valid at most; never past the run's own timeout"`
	// AllowedOrigins is normalized by Load (httpserve.ParseOrigin).
	AllowedOrigins []string `env:"ALLOWED_ORIGINS" envSeparator:"," accepted:"a comma-separated list of exact web origins scheme://host[:port], such as http://localhost:6274 (no path, no wildcard, not null)" help:"web pages of these origins may call the HTTP listeners (the sse and http transports, with CORS; the approvals console and the metrics listener, without); a request whose Origin header is neither one of these nor the server's own is refused with 403, and clients that send no Origin (MCP SDKs, curl) are not affected; empty lets no other origin in"`

	Timeout    time.Duration `env:"TIMEOUT" envDefault:"10s" accepted:"a duration such as 10s or 1m30s" help:"wall-clock limit of a run that does not ask for one"`
	MaxTimeout time.Duration `env:"MAX_TIMEOUT" envDefault:"60s" accepted:"a duration such as 60s or 5m" help:"the most a request's timeout_seconds may ask for; more is rejected"`
	Memory     ByteSize      `env:"MEMORY" envDefault:"256m" accepted:"a byte size such as 256m or 1g (at least 32m)" help:"memory limit of a run (container memory in docker mode; data and address-space limits in process mode)"`
	CPUs       float64       `env:"CPUS" envDefault:"1" accepted:"a number of CPUs such as 1 or 0.5" help:"CPU limit of a run (CPU bandwidth in docker mode; CPU time = CPUs × timeout in process mode)"`
	Pids       int           `env:"PIDS" envDefault:"64" accepted:"a whole number from 8 to 65536" help:"most processes and threads a run may have"`
	OpenFiles  int           `env:"OPEN_FILES" envDefault:"256" accepted:"a whole number from 16 to 1048576" help:"most open files per process of a run"`
	FileSize   ByteSize      `env:"FILE_SIZE" envDefault:"64m" accepted:"a byte size such as 64m" help:"largest file a run may write (in docker mode also the size of its /tmp)"`
	MaxOutput  ByteSize      `env:"MAX_OUTPUT" envDefault:"1m" accepted:"a byte size such as 1m (at least 1k)" help:"stdout and stderr kept per run, together; a program that writes more is stopped and its result marked truncated"`
	MaxCode    ByteSize      `env:"MAX_CODE" envDefault:"256k" accepted:"a byte size such as 256k" help:"largest program text accepted"`
	MaxStdin   ByteSize      `env:"MAX_STDIN" envDefault:"1m" accepted:"a byte size such as 1m" help:"largest stdin accepted"`

	MaxFiles         int           `env:"MAX_FILES" envDefault:"20" accepted:"a whole number from 0 to 1000" help:"most files a request may bring in its files argument (written into the run's working directory before it starts); 0 refuses the files argument"`
	MaxFilesBytes    ByteSize      `env:"MAX_FILES_BYTES" envDefault:"10m" accepted:"a byte size such as 10m (at most CODE_EXEC_FILE_SIZE)" help:"most bytes a request's files may hold together, decoded"`
	MaxArtifacts     int           `env:"MAX_ARTIFACTS" envDefault:"20" accepted:"a whole number from 0 to 1000" help:"most files a run brings back (files it created or changed in its working directory: images, embedded text, links); the rest are listed as left out; 0 brings none back"`
	MaxArtifactBytes ByteSize      `env:"MAX_ARTIFACT_BYTES" envDefault:"16m" accepted:"a byte size such as 16m" help:"most bytes a run's artifacts may hold together; a file that does not fit is listed as left out"`
	ArtifactTTL      time.Duration `env:"ARTIFACT_TTL" envDefault:"1h" accepted:"a duration such as 1h or 10m (from 1s to 168h)" help:"how long resources/read serves a run's artifacts and the whole of a long output (codeexec://runs/<run id>/<path>) after the run"`
	ArtifactStore    ByteSize      `env:"ARTIFACT_STORE_BYTES" envDefault:"256m" accepted:"a byte size such as 256m (at least CODE_EXEC_MAX_ARTIFACT_BYTES)" help:"memory kept for recent runs' artifacts and long outputs in all; the oldest runs' are dropped first"`
	Workspace        string        `env:"WORKSPACE" accepted:"an absolute path to a folder" help:"a project folder every run can see, at /workspace in docker mode and in process mode with a mount namespace (at its own path otherwise), named by the WORKSPACE variable of the program; empty gives runs none"`
	WorkspaceMode    string        `env:"WORKSPACE_MODE" envDefault:"ro" accepted:"ro or rw" help:"whether runs may change the workspace: ro (read-only, the default) or rw"`

	MaxConcurrency int      `env:"MAX_CONCURRENCY" envDefault:"4" accepted:"a whole number from 1 to 1024" help:"most runs at once; further requests wait their turn, the clients that wait taking free slots in turn; runs of MCP tasks hold at most all the slots but one (all of them when it is 1), so that a call a client waits on never waits behind tasks"`
	Languages      []string `env:"LANGUAGES" envDefault:"python,javascript,bash" envSeparator:"," accepted:"a comma-separated list of python, javascript, bash" help:"languages that may run"`
	WorkDir        string   `env:"WORK_DIR" accepted:"a directory path" help:"where process and none modes make run directories (default: the system temporary directory)"`

	PythonPolicy         string   `env:"PYTHON_POLICY" envDefault:"standard" accepted:"standard or restricted" help:"restricted checks python code inside the sandbox before its first line and runs it under a language-level policy (allowed imports only; no open, eval, exec, compile, globals, locals, vars, breakpoint, dunder attributes, frame internals or getattr-family escapes); a refusal is an error naming the rule and the line; a layer on top of the sandbox, never instead of it"`
	PythonAllowedImports []string `env:"PYTHON_ALLOWED_IMPORTS" envDefault:"datetime,calendar,re,math,decimal,fractions,statistics,collections,itertools,functools,operator,json" envSeparator:"," accepted:"a comma-separated list of top-level module names, none of which hands out the interpreter (sys, os, builtins, importlib, inspect, types, typing ... are refused)" help:"restricted python: the modules programs may import"`
	PythonMaxASTNodes    int      `env:"PYTHON_MAX_AST_NODES" envDefault:"20000" accepted:"a whole number from 100 to 1000000" help:"restricted python: the most syntax-tree nodes a program may have"`

	MaxSessions        int           `env:"MAX_SESSIONS" envDefault:"8" accepted:"a whole number from 0 to 1024" help:"most sessions (session_create) at once, all clients together; each holds a container (docker mode), a pod (kubernetes mode) or an interpreter (process mode) while it lives; 0 turns sessions off"`
	SessionIdleTimeout time.Duration `env:"SESSION_IDLE_TIMEOUT" envDefault:"10m" accepted:"a duration such as 10m (from 1s to 24h)" help:"a session that no call used for this long ends by itself, and its files, processes and container are removed"`
	SessionMaxLifetime time.Duration `env:"SESSION_MAX_LIFETIME" envDefault:"1h" accepted:"a duration such as 1h (from 1s to 168h)" help:"a session ends this long after it was created, however busy"`

	ProcessDisable  []string `env:"PROCESS_DISABLE" envSeparator:"," accepted:"a comma-separated list of user, pid, network, ipc, uts, mount, landlock, seccomp, cgroup, uid-range, seatbelt (macOS)" help:"process mode: isolation features to turn off (for example network, for code that must reach the network)"`
	ProcessStrict   bool     `env:"PROCESS_STRICT" envDefault:"false" accepted:"true or false" help:"process mode: refuse to start unless every kernel isolation feature is active on this host (namespaces, Landlock, the seccomp filter, the runs' cgroups and, as root, their own users)"`
	ProcessUIDRange UIDRange `env:"PROCESS_UID_RANGE" envDefault:"200000-200063" accepted:"FIRST-LAST, host user ids from 1 to 4294967294 without 65534, for example 200000-200063" help:"process mode, when the server is root: host user ids that runs take, one per run in flight (more runs at once wait for a free one); nothing else should use them"`

	// ProcessPoolSize defaults to 1: the next run is prepared while the
	// model thinks, for a sequential agent loop.
	ProcessPoolSize int `env:"PROCESS_POOL_SIZE" envDefault:"1" accepted:"a whole number from 0 to 16" help:"process mode, on Linux: runs prepared ahead of demand, per language and limits that requests ask for, more while back-to-back requests find none (their host user, cgroups and directories taken, their supervisor started in the run's namespaces, and python's and javascript's interpreter started in the run's sandbox, waiting); each serves one request; 0 prepares every run on demand"`

	DockerImage     string `env:"DOCKER_IMAGE" envDefault:"codeexec-sandbox:latest" accepted:"an image reference" help:"sandbox image of docker mode; when the engine lacks it, docker mode pulls it if its name begins with a registry (registry.example.com/team/sandbox:1), and builds codeexec-sandbox:latest and codeexec-sandbox:datascience from the Dockerfile embedded in codeexec (see CODE_EXEC_DOCKER_PULL)"`
	DockerBaseImage string `env:"DOCKER_BASE_IMAGE" envDefault:"debian:bookworm-slim" accepted:"an image reference of a Debian bookworm image" help:"docker mode: the base that a missing codeexec-sandbox:latest or codeexec-sandbox:datascience is built on at start; pulled first when the engine lacks it"`
	DockerPull      string `env:"DOCKER_PULL" envDefault:"missing" accepted:"missing or never" help:"docker mode: what happens when the engine lacks the sandbox image: missing pulls it (a name that begins with a registry) or builds it (codeexec's own images), saying so in the log; never does neither, and the server stops with the command that gets it"`
	DockerRuntime   string `env:"DOCKER_RUNTIME" accepted:"a runtime the engine knows, such as runsc" help:"OCI runtime for docker mode containers (for example gVisor's runsc); empty means the engine's default"`
	// DockerPoolSize defaults to 2: one warm container serves a sequential
	// agent loop (the next is made while the model thinks), the second
	// absorbs a pair of calls, and 2 per language costs about 200 MB.
	DockerPoolSize int `env:"DOCKER_POOL_SIZE" envDefault:"2" accepted:"a whole number from 0 to 64" help:"warm containers docker mode keeps per language, created and started ahead of demand and locked down like any other; each serves one run and is then removed; 0 creates every container on demand"`

	// Kubernetes mode (CODE_EXEC_SANDBOX=kubernetes); validated in kube.go.
	K8sNamespace         string   `env:"K8S_NAMESPACE" envDefault:"codeexec-runs" accepted:"a namespace name (lower-case letters, digits and -)" help:"kubernetes mode: the namespace of the runs' pods and of each replica's Lease; deploy/kubernetes/ makes it with Pod Security restricted and a deny-all NetworkPolicy"`
	K8sImage             string   `env:"K8S_IMAGE" accepted:"an image reference the cluster's nodes can pull or have" help:"kubernetes mode: the sandbox image of the runs' pods; empty means the value of CODE_EXEC_DOCKER_IMAGE, the sandbox image name"`
	K8sRuntimeClass      string   `env:"K8S_RUNTIME_CLASS" accepted:"the name of a RuntimeClass of the cluster, such as gvisor" help:"kubernetes mode: the RuntimeClass of the runs' pods (gVisor, Kata ...); empty means the cluster's default runtime"`
	K8sPoolSize          int      `env:"K8S_POOL_SIZE" envDefault:"2" accepted:"a whole number from 0 to 64" help:"kubernetes mode: warm pods per language and replica, started and attached ahead of demand and locked down like any other; each serves one run and is then deleted; 0 starts every pod on demand"`
	K8sUserNamespaces    bool     `env:"K8S_USER_NAMESPACES" envDefault:"false" accepted:"true or false" help:"kubernetes mode: give each pod a user namespace of its own (hostUsers: false), which needs nodes whose container runtime supports it"`
	K8sNetworkCheck      string   `env:"K8S_NETWORK_CHECK" envDefault:"refuse" accepted:"refuse or warn" help:"kubernetes mode: what happens when the probe pod that runs at start reaches the API server, this server, a cloud's metadata service or an address of CODE_EXEC_K8S_NETWORK_CHECK_ADDRS: refuse to start, or warn (loudly, at start and in sandbox_info, which then reports the network as not isolated)"`
	K8sNetworkCheckAddrs []string `env:"K8S_NETWORK_CHECK_ADDRS" envSeparator:"," accepted:"a comma-separated list of host:port (IP addresses: pods have no DNS)" help:"kubernetes mode: more destinations the probe pod must not reach, such as a database of the cluster's network"`

	Network               Network       `env:"NETWORK" envDefault:"none" accepted:"none or allowlist" help:"what runs may reach: none (no network at all) or allowlist (only the destinations of CODE_EXEC_NETWORK_ALLOW, through codeexec's egress proxy; HTTP_PROXY and HTTPS_PROXY are set for programs)"`
	NetworkAllow          []string      `env:"NETWORK_ALLOW" envSeparator:"," accepted:"a comma-separated list of host, host:port, *.suffix or *.suffix:port" help:"with CODE_EXEC_NETWORK=allowlist, the destinations runs may reach; an entry without a port allows 80 and 443; *.example.com matches every subdomain of example.com, not example.com itself"`
	NetworkAllowPrivate   bool          `env:"NETWORK_ALLOW_PRIVATE" envDefault:"false" accepted:"true or false" help:"with CODE_EXEC_NETWORK=allowlist, let runs reach loopback, private (RFC 1918, ULA), CGNAT, link-local, benchmarking, local-use NAT64 and cloud metadata addresses, which are refused after name resolution otherwise; documentation, reserved, multicast and the other special-purpose ranges stay refused"`
	NetworkResolve        string        `env:"NETWORK_RESOLVE" accepted:"a comma-separated list of name=address" help:"with CODE_EXEC_NETWORK=allowlist, names the egress proxy resolves to fixed addresses instead of asking DNS"`
	NetworkMaxConnections int           `env:"NETWORK_MAX_CONNECTIONS" envDefault:"64" accepted:"a whole number from 1 to 100000" help:"with CODE_EXEC_NETWORK=allowlist, most connections a run may open"`
	NetworkMaxBytes       ByteSize      `env:"NETWORK_MAX_BYTES" envDefault:"64m" accepted:"a byte size such as 64m (at least 1k)" help:"with CODE_EXEC_NETWORK=allowlist, most bytes a run may send and receive, all connections together"`
	NetworkConnectTimeout time.Duration `env:"NETWORK_CONNECT_TIMEOUT" envDefault:"10s" accepted:"a duration such as 10s (from 100ms to 5m)" help:"with CODE_EXEC_NETWORK=allowlist, how long the egress proxy may take to resolve a name and connect"`
	NetworkIdleTimeout    time.Duration `env:"NETWORK_IDLE_TIMEOUT" envDefault:"30s" accepted:"a duration such as 30s (from 1s to 1h)" help:"with CODE_EXEC_NETWORK=allowlist, a connection on which nothing moved for this long is closed"`

	Packages           bool          `env:"PACKAGES" envDefault:"false" accepted:"true or false" help:"let code_execute install packages (its packages argument: pip requirement specifiers for python, npm specs for javascript) in an install phase whose only reachable destination is the package index, cached on the host and given to runs read-only; the run itself keeps the network policy of CODE_EXEC_NETWORK; off by default"`
	PipIndexURL        string        `env:"PIP_INDEX_URL" accepted:"an http or https URL of a PEP 503 simple index, such as the public index's https://HOST/simple/ or a local mirror" help:"with CODE_EXEC_PACKAGES=true, the index python packages are installed from (the install phase reaches this host:port and nothing else); empty refuses python packages"`
	NpmRegistry        string        `env:"NPM_REGISTRY" accepted:"an http or https URL of an npm registry" help:"with CODE_EXEC_PACKAGES=true, the registry javascript packages are installed from (the install phase reaches this host:port and nothing else); empty refuses javascript packages"`
	PackagesAllow      []string      `env:"PACKAGES_ALLOW" envSeparator:"," accepted:"a comma-separated list of host, host:port, *.suffix or *.suffix:port" help:"with CODE_EXEC_PACKAGES=true, more destinations the install phase may reach besides the index hosts: where an index serves its files from another host (the public python index serves them from a separate files host), list that host here; an entry without a port allows 80 and 443"`
	PackagesCacheDir   string        `env:"PACKAGES_CACHE_DIR" accepted:"an absolute directory path, owned by the server's user, whose parents others may search" help:"with CODE_EXEC_PACKAGES=true, where installed packages are kept between runs and restarts (default: codeexec-packages-UID in the system temporary directory)"`
	PackagesCacheBytes ByteSize      `env:"PACKAGES_CACHE_BYTES" envDefault:"2g" accepted:"a byte size such as 2g (at least 16m)" help:"with CODE_EXEC_PACKAGES=true, the most the package cache may hold; the least recently used lists not in use are removed beyond it"`
	PackagesMaxBytes   ByteSize      `env:"PACKAGES_MAX_BYTES" envDefault:"512m" accepted:"a byte size such as 512m (at least 1m, at most CODE_EXEC_PACKAGES_CACHE_BYTES)" help:"with CODE_EXEC_PACKAGES=true, the most one installed list may take (and each file the install writes); a larger install fails"`
	PackagesTimeout    time.Duration `env:"PACKAGES_TIMEOUT" envDefault:"2m" accepted:"a duration such as 2m (from 1s to 1h)" help:"with CODE_EXEC_PACKAGES=true, the wall-clock limit of one install phase"`

	Approval        approvals.Policy `env:"APPROVAL" envDefault:"never" accepted:"never, always or risky" help:"when a person must approve code before it runs: never, always, or risky (only runs that the risk check flags: network, subprocesses, deleting or overwriting files, privileges, environment variables or credentials, dynamic code, hidden or disguised text, in the code, its files or stdin, and files that hold code that cannot be shown)"`
	ApprovalTimeout time.Duration    `env:"APPROVAL_TIMEOUT" envDefault:"5m" accepted:"a duration such as 5m (from 1s to 24h)" help:"how long a run waits for a person's approval; no answer in time means denied"`
	ApprovalElicit  Elicit           `env:"APPROVAL_ELICIT" envDefault:"auto" accepted:"auto, true or false" help:"whether the MCP client's answer to an approval request (elicitation) counts: auto counts it where a person stands behind the client (stdio, and HTTP without CODE_EXEC_AUTH_TOKEN or CODE_EXEC_PRINCIPALS_FILE), and not behind a token, where the client is usually an agent that must not approve its own code; true counts it everywhere (opt in only if every holder of the token is a person's client); false never asks the client, only the approvals console and CLI"`
	AdminAddr       string           `env:"ADMIN_ADDR" envDefault:"127.0.0.1:8081" accepted:"host:port, or off" help:"listen address of the approvals console and its API (started only when CODE_EXEC_APPROVAL is not never, or a principal of CODE_EXEC_PRINCIPALS_FILE asks for approval); an address other than loopback requires CODE_EXEC_ADMIN_TOKEN; codeexec approvals talks to it"`
	AdminToken      string           `env:"ADMIN_TOKEN" accepted:"a secret of at least 16 characters" help:"bearer token of the approvals console, its API and the CLI, which always need one; when empty, the server makes a random token at start and writes it to CODE_EXEC_ADMIN_TOKEN_FILE; required when CODE_EXEC_ADMIN_ADDR is not loopback" secret:"true"`
	AdminTokenFile  string           `env:"ADMIN_TOKEN_FILE" accepted:"a file path" help:"where the server writes the token it makes when CODE_EXEC_ADMIN_TOKEN is empty (mode 0600, removed at exit) and where codeexec approvals reads it; refused when a folder on its path belongs to a user other than root and the server's, or may be written by group or others without being sticky; empty means $XDG_RUNTIME_DIR/codeexec/admin-HOST-PORT.token, or codeexec/admin-HOST-PORT.token in the user's cache directory when XDG_RUNTIME_DIR is unset"`
	AuditLog        string           `env:"AUDIT_LOG" accepted:"a file path" help:"append every request, approval decision and run outcome to this JSON Lines file, hash-chained (check it with codeexec audit verify FILE); empty records nothing"`

	TaskMaxTimeout time.Duration `env:"TASK_MAX_TIMEOUT" envDefault:"1h" accepted:"a duration such as 1h (from CODE_EXEC_MAX_TIMEOUT to 24h)" help:"the most a run of code_execute as an MCP task may take: a task's timeout_seconds may ask up to this instead of CODE_EXEC_MAX_TIMEOUT"`
	TaskTTL        time.Duration `env:"TASK_TTL" envDefault:"10m" accepted:"a duration such as 10m (from 1s to 24h)" help:"how long a task's result is kept after it ends, for the client to fetch; a client may ask for less; when 1000 tasks are held, the oldest ended task of the client that holds the most is dropped first"`

	MaxTasksPerClient     int      `env:"MAX_TASKS_PER_CLIENT" envDefault:"16" accepted:"a whole number from 1 to 1000" help:"most MCP tasks one client (an MCP client session; protocol 2026-07-28 has no sessions, so its clients count as one per principal) may have queued or running at once; more are refused"`
	MaxTaskBytes          ByteSize `env:"MAX_TASK_BYTES" envDefault:"256m" accepted:"a byte size such as 256m (at least CODE_EXEC_MAX_TASK_BYTES_PER_CLIENT)" help:"most bytes of arguments (code, stdin and files, decoded) that the MCP tasks queued or running may hold in memory, all clients together; a task that would pass it is refused"`
	MaxTaskBytesPerClient ByteSize `env:"MAX_TASK_BYTES_PER_CLIENT" envDefault:"64m" accepted:"a byte size such as 64m (at least CODE_EXEC_MAX_CODE + CODE_EXEC_MAX_STDIN + CODE_EXEC_MAX_FILES_BYTES)" help:"most bytes of arguments (code, stdin and files, decoded) that one client's MCP tasks queued or running may hold in memory; a task that would pass it is refused"`
	MetricsAddr           string   `env:"METRICS_ADDR" accepted:"host:port, or empty for off" help:"listen address of the Prometheus metrics (/metrics) and the probes /healthz and /readyz; empty serves none; an address other than loopback requires CODE_EXEC_METRICS_TOKEN"`
	MetricsToken          string   `env:"METRICS_TOKEN" accepted:"a secret of at least 16 characters" help:"bearer token that /metrics requires; required when CODE_EXEC_METRICS_ADDR is not loopback" secret:"true"`

	ReplicaID   string   `env:"REPLICA_ID" accepted:"1 to 32 lower-case letters, digits and -, starting and ending with a letter or digit" help:"this replica's id, which every id it issues carries (MCP session, codeexec session, task, artifact URI, approval request) so that another replica forwards requests for them here; required with CODE_EXEC_PEERS; empty issues ids as a single server does"`
	Peers       []string `env:"PEERS" envSeparator:"," accepted:"a comma-separated list of id=URL, such as b=http://10.0.0.2:8080" help:"the other replicas behind the same address, each with the base URL of its sse or http transport; a request for an id another replica issued is forwarded to it, streams included; empty is a single server"`
	PeerToken   string   `env:"PEER_TOKEN" accepted:"a secret of at least 32 characters, the same on every replica" help:"authenticates the replicas of CODE_EXEC_PEERS to each other: sent on every forwarded request and on the replicas' calls for approvals, and checked in constant time; required with CODE_EXEC_PEERS" secret:"true"`
	ApprovalKey string   `env:"APPROVAL_KEY" accepted:"a secret of at least 32 characters, the same on every replica" help:"the key that signs the approval state a client carries back (MCP multi-round-trip requests), so that every replica checks another's; empty means a random key per start" secret:"true"`

	DrainTimeout time.Duration `env:"DRAIN_TIMEOUT" accepted:"a duration such as 30s (from 0s to 1h)" help:"on SIGTERM or SIGINT over HTTP, /readyz answers 503 at once and new MCP sessions and runs are refused with 503 (a load balancer sends them elsewhere), while runs in flight and the requests of existing sessions go on for at most this long; then the server stops what is left and exits; empty means 30s with CODE_EXEC_PEERS and 0s (stop at once) without"`

	LogLevel  string `env:"LOG_LEVEL" envDefault:"info" accepted:"debug, info, warn or error" help:"least severe log level written (to stderr)"`
	LogFormat string `env:"LOG_FORMAT" envDefault:"text" accepted:"text or json" help:"log format on stderr: text for people, json for machines"`
}

// Load reads the configuration from environ (KEY=value pairs, as from
// os.Environ) and validates it. A name that looks like a setting but is
// none (see CheckNames) is an error too, named before the bad values.
// Enumerated values are matched case-insensitively (Docker is docker).
func Load(environ []string) (*Config, error) {
	vars := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	unknown := CheckNames(environ)
	var c Config
	err := env.ParseWithOptions(&c, env.Options{Prefix: Prefix, Environment: vars})
	if err != nil {
		return nil, joinOneLine(slices.DeleteFunc([]error{unknown, explain(err, vars)}, isNil))
	}
	c.Languages = normalizeList(c.Languages, sandbox.CanonicalLanguage)
	c.AllowedOrigins = normalizeList(c.AllowedOrigins, httpserve.ParseOrigin)
	c.PythonAllowedImports = normalizeList(c.PythonAllowedImports, func(m string) (string, error) { return m, nil })
	for _, v := range []*string{&c.WorkspaceMode, &c.PythonPolicy, &c.K8sNetworkCheck, &c.DockerPull, &c.LogLevel, &c.LogFormat} {
		*v = strings.ToLower(strings.TrimSpace(*v))
	}
	if _, set := vars[Prefix+"DRAIN_TIMEOUT"]; !set && len(c.Peers) > 0 {
		c.DrainTimeout = DefaultReplicaDrain
	}
	if errs := slices.DeleteFunc([]error{unknown, c.Validate()}, isNil); len(errs) > 0 {
		return nil, joinOneLine(errs)
	}
	return &c, nil
}

func isNil(err error) bool { return err == nil }

// normalizeList writes each entry of a list setting as canonical does
// (language aliases as their names, origins as browsers send them) and drops
// blanks and repeats; an entry that canonical refuses is kept, trimmed, so
// that Validate can name it.
func normalizeList(in []string, canonical func(string) (string, error)) []string {
	var out []string
	for _, v := range in {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if c, err := canonical(v); err == nil {
			v = c
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// explain turns a parse error into one line per bad variable, each naming
// the variable, the value and the accepted values.
func explain(err error, vars map[string]string) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	var lines []string
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if f, ok := fieldByName(pe.Name); ok {
				name := Prefix + f.Tag.Get("env")
				lines = append(lines, fmt.Sprintf("%s=%q is not valid: use %s", name, vars[name], f.Tag.Get("accepted")))
				continue
			}
		}
		lines = append(lines, e.Error())
	}
	return errors.New(strings.Join(lines, "; "))
}

func fieldByName(name string) (reflect.StructField, bool) {
	return reflect.TypeFor[Config]().FieldByName(name)
}

// Invalid is the error of a value of the setting of Config's field that
// parsed but is not valid, for why: it names the variable, the value and
// the accepted values.
func Invalid(field string, value any, why string) error {
	f, _ := fieldByName(field)
	return fmt.Errorf("%s=%v is not valid: %s; use %s", Prefix+f.Tag.Get("env"), value, why, f.Tag.Get("accepted"))
}

// Validate checks ranges and the rules between settings.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, field string, value any, why string) {
		if !ok {
			errs = append(errs, Invalid(field, value, why))
		}
	}
	check(c.Timeout > 0, "Timeout", c.Timeout, "it must be positive")
	check(c.MaxTimeout > 0 && c.MaxTimeout <= 24*time.Hour, "MaxTimeout", c.MaxTimeout, "it must be positive and at most 24h")
	if c.Timeout > 0 && c.MaxTimeout > 0 && c.Timeout > c.MaxTimeout {
		errs = append(errs, fmt.Errorf("CODE_EXEC_TIMEOUT=%v is larger than CODE_EXEC_MAX_TIMEOUT=%v: the default timeout must be within the cap", c.Timeout, c.MaxTimeout))
	}
	check(c.Memory >= 32<<20, "Memory", c.Memory, "it is below 32m")
	check(c.CPUs > 0 && c.CPUs <= 1024, "CPUs", c.CPUs, "it must be above 0")
	check(c.Pids >= 8 && c.Pids <= 65536, "Pids", c.Pids, "it is out of range")
	check(c.OpenFiles >= 16 && c.OpenFiles <= 1<<20, "OpenFiles", c.OpenFiles, "it is out of range")
	check(c.FileSize >= 1<<20, "FileSize", c.FileSize, "it is below 1m")
	check(c.MaxOutput >= 1<<10, "MaxOutput", c.MaxOutput, "it is below 1k")
	check(c.MaxCode >= 16, "MaxCode", c.MaxCode, "it is too small")
	check(c.MaxStdin >= 0, "MaxStdin", c.MaxStdin, "it is negative")
	check(c.MaxConcurrency >= 1 && c.MaxConcurrency <= 1024, "MaxConcurrency", c.MaxConcurrency, "it is out of range")
	check(c.MaxSessions >= 0 && c.MaxSessions <= 1024, "MaxSessions", c.MaxSessions, "it is out of range")
	check(c.SessionIdleTimeout >= time.Second && c.SessionIdleTimeout <= 24*time.Hour, "SessionIdleTimeout", c.SessionIdleTimeout, "it is out of range")
	check(c.SessionMaxLifetime >= time.Second && c.SessionMaxLifetime <= 168*time.Hour, "SessionMaxLifetime", c.SessionMaxLifetime, "it is out of range")
	check(c.DockerPoolSize >= 0 && c.DockerPoolSize <= 64, "DockerPoolSize", c.DockerPoolSize, "it is out of range")
	check(c.DockerPull == "missing" || c.DockerPull == "never", "DockerPull", c.DockerPull, "unknown value")
	check(strings.TrimSpace(c.DockerBaseImage) != "", "DockerBaseImage", `""`, "it is empty")
	check(c.ProcessPoolSize >= 0 && c.ProcessPoolSize <= 16, "ProcessPoolSize", c.ProcessPoolSize, "it is out of range")
	check(c.MaxFiles >= 0 && c.MaxFiles <= 1000, "MaxFiles", c.MaxFiles, "it is out of range")
	check(c.MaxFilesBytes >= 0 && c.MaxFilesBytes <= c.FileSize, "MaxFilesBytes", c.MaxFilesBytes, "the files must fit in a run's working directory, whose size CODE_EXEC_FILE_SIZE caps")
	check(c.MaxArtifacts >= 0 && c.MaxArtifacts <= 1000, "MaxArtifacts", c.MaxArtifacts, "it is out of range")
	check(c.MaxArtifactBytes >= 0, "MaxArtifactBytes", c.MaxArtifactBytes, "it is negative")
	check(c.ArtifactTTL >= time.Second && c.ArtifactTTL <= 168*time.Hour, "ArtifactTTL", c.ArtifactTTL, "it is out of range")
	check(c.ArtifactStore >= c.MaxArtifactBytes, "ArtifactStore", c.ArtifactStore, "it must hold at least one run's artifacts")
	check(c.WorkspaceMode == "ro" || c.WorkspaceMode == "rw", "WorkspaceMode", c.WorkspaceMode, "unknown mode")
	if c.Workspace != "" {
		if fi, err := os.Stat(c.Workspace); !filepath.IsAbs(c.Workspace) || err != nil || !fi.IsDir() {
			errs = append(errs, Invalid("Workspace", c.Workspace, "it is not an absolute path to an existing folder"))
		}
	}
	if len(c.Languages) == 0 {
		errs = append(errs, Invalid("Languages", `""`, "no language is enabled"))
	}
	for _, l := range c.Languages {
		if _, ok := sandbox.Languages[l]; !ok {
			errs = append(errs, Invalid("Languages", l, "unknown language"))
		}
	}
	for _, f := range c.ProcessDisable {
		f = strings.ToLower(strings.TrimSpace(f))
		if f != "" && !slices.Contains([]string{"user", "pid", "network", "ipc", "uts", "mount", "landlock", "seccomp", "cgroup", "uid-range"}, f) {
			errs = append(errs, Invalid("ProcessDisable", f, "unknown feature"))
		}
	}
	check(c.PythonPolicy == "standard" || c.PythonPolicy == pypolicy.Name, "PythonPolicy", c.PythonPolicy, "unknown policy")
	check(c.PythonMaxASTNodes >= 100 && c.PythonMaxASTNodes <= 1_000_000, "PythonMaxASTNodes", c.PythonMaxASTNodes, "it is out of range")
	if err := pypolicy.ValidateImports(c.PythonAllowedImports); err != nil {
		errs = append(errs, fmt.Errorf("CODE_EXEC_PYTHON_ALLOWED_IMPORTS is not valid: %w", err))
	}
	errs = append(errs, c.validateNetwork()...)
	errs = append(errs, c.validatePackages()...)
	errs = append(errs, c.validateKubernetes()...)
	check(slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel), "LogLevel", c.LogLevel, "unknown level")
	check(c.LogFormat == "text" || c.LogFormat == "json", "LogFormat", c.LogFormat, "unknown format")
	for _, o := range c.AllowedOrigins {
		if _, err := httpserve.ParseOrigin(o); err != nil {
			errs = append(errs, Invalid("AllowedOrigins", strconv.Quote(o), err.Error()))
		}
	}
	if c.AuthToken != "" && len(c.AuthToken) < 16 {
		errs = append(errs, fmt.Errorf("CODE_EXEC_AUTH_TOKEN is too short (%d characters): use at least 16 random characters, for example from `openssl rand -hex 32`", len(c.AuthToken)))
	}
	errs = append(errs, c.validatePrincipals()...)
	errs = append(errs, c.validateReplicas()...)
	check(c.ApprovalTimeout >= time.Second && c.ApprovalTimeout <= 24*time.Hour, "ApprovalTimeout", c.ApprovalTimeout, "it is out of range")
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		errs = append(errs, fmt.Errorf("CODE_EXEC_ADMIN_TOKEN is too short (%d characters): use at least 16 random characters, for example from `openssl rand -hex 32`", len(c.AdminToken)))
	}
	check(c.TaskMaxTimeout >= c.MaxTimeout && c.TaskMaxTimeout <= 24*time.Hour, "TaskMaxTimeout", c.TaskMaxTimeout, "it must be at least CODE_EXEC_MAX_TIMEOUT and at most 24h")
	check(c.TaskTTL >= time.Second && c.TaskTTL <= 24*time.Hour, "TaskTTL", c.TaskTTL, "it is out of range")
	check(c.MaxTasksPerClient >= 1 && c.MaxTasksPerClient <= 1000, "MaxTasksPerClient", c.MaxTasksPerClient, "it is out of range")
	check(c.MaxTaskBytesPerClient >= c.MaxCode+c.MaxStdin+c.MaxFilesBytes, "MaxTaskBytesPerClient", c.MaxTaskBytesPerClient, "a task with the largest code, stdin and files accepted must fit")
	check(c.MaxTaskBytes >= c.MaxTaskBytesPerClient, "MaxTaskBytes", c.MaxTaskBytes, "it must hold at least one client's tasks")
	if c.MetricsToken != "" && len(c.MetricsToken) < 16 {
		errs = append(errs, fmt.Errorf("CODE_EXEC_METRICS_TOKEN is too short (%d characters): use at least 16 random characters, for example from `openssl rand -hex 32`", len(c.MetricsToken)))
	}
	if err := c.ValidateMetrics(); err != nil {
		errs = append(errs, err)
	}
	if err := c.ValidateAdmin(); err != nil {
		errs = append(errs, err)
	}
	if err := c.ValidateListen(); err != nil {
		errs = append(errs, err)
	}
	return joinOneLine(errs)
}

// joinOneLine joins errors into one line, so that a start-up failure is one
// line however many settings are wrong.
func joinOneLine(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// ValidateListen checks the listen address of the HTTP transports: it must
// parse, and an address beyond loopback requires an auth token. Call it again
// after flags change Transport or Addr.
func (c *Config) ValidateListen() error {
	if c.Transport == TransportStdio {
		return nil
	}
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return Invalid("Addr", c.Addr, err.Error())
	}
	if !IsLoopback(host) && c.AuthToken == "" && c.PrincipalsFile == "" {
		return fmt.Errorf("refusing to listen on %s without authentication: CODE_EXEC_ADDR is not a loopback address, so set CODE_EXEC_AUTH_TOKEN or CODE_EXEC_PRINCIPALS_FILE (clients then send Authorization: Bearer <token>) or listen on 127.0.0.1", c.Addr)
	}
	return nil
}

// ValidatePrincipals checks that a principals file goes with an HTTP
// transport. Call it once flags have set Transport.
func (c *Config) ValidatePrincipals() error {
	if c.PrincipalsFile != "" && c.Transport == TransportStdio {
		return errors.New("CODE_EXEC_PRINCIPALS_FILE is set but the transport is stdio: principals are told apart by the bearer tokens of the HTTP transports, and stdio's one client is the principal local; use --transport http or sse, or unset it")
	}
	return nil
}

// validatePrincipals checks the settings of principals and run tokens
// (the principals file itself is read where it is loaded).
func (c *Config) validatePrincipals() []error {
	var errs []error
	if c.PrincipalsFile != "" && c.AuthToken != "" {
		errs = append(errs, errors.New("CODE_EXEC_AUTH_TOKEN and CODE_EXEC_PRINCIPALS_FILE are both set: with a principals file every client sends the token of its own principal, so list this token's SHA-256 in the file as a principal and unset CODE_EXEC_AUTH_TOKEN"))
	}
	if c.RunTokenKey != "" && len(c.RunTokenKey) < 32 {
		errs = append(errs, fmt.Errorf("CODE_EXEC_RUN_TOKEN_KEY is too short (%d characters): use at least 32 random characters, for example from `openssl rand -hex 32`", len(c.RunTokenKey)))
	}
	if c.RunTokenTTL < time.Second || c.RunTokenTTL > 24*time.Hour {
		errs = append(errs, Invalid("RunTokenTTL", c.RunTokenTTL, "it is out of range"))
	}
	return errs
}

// Elicit says whether an MCP client's answer to an approval request
// (elicitation) counts as a person's approval. Its values are the accepted
// values of CODE_EXEC_APPROVAL_ELICIT.
type Elicit string

// The values of Elicit.
const (
	// ElicitAuto counts the client's answer where a person stands behind
	// the client: stdio, and HTTP without CODE_EXEC_AUTH_TOKEN.
	ElicitAuto Elicit = "auto"
	// ElicitTrue counts it on every transport (the operator opted in).
	ElicitTrue Elicit = "true"
	// ElicitFalse never asks the client.
	ElicitFalse Elicit = "false"
)

// UnmarshalText accepts auto and the values strconv.ParseBool accepts.
func (e *Elicit) UnmarshalText(b []byte) error {
	s := strings.ToLower(strings.TrimSpace(string(b)))
	if s == string(ElicitAuto) {
		*e = ElicitAuto
		return nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("unknown value %q (accepted: auto, true, false)", string(b))
	}
	*e = ElicitFalse
	if v {
		*e = ElicitTrue
	}
	return nil
}

// ElicitationCounts reports whether an MCP client's answer to an approval
// request counts as a person's approval in this configuration, and why, as
// a sentence fragment for sandbox_info and the start-up log. Behind a
// gateway the MCP client is the agent whose code waits for approval, so by
// default only clients with a person behind them may answer: stdio (a
// desktop app or IDE starts the server) and HTTP without a token (which
// listens on loopback only).
func (c *Config) ElicitationCounts() (bool, string) {
	switch {
	case c.ApprovalElicit == ElicitTrue:
		return true, "CODE_EXEC_APPROVAL_ELICIT=true counts the MCP client's answers on every transport"
	case c.ApprovalElicit == ElicitFalse:
		return false, "CODE_EXEC_APPROVAL_ELICIT=false"
	case c.Transport == TransportStdio:
		return true, "over stdio the MCP client is the desktop app or IDE of the person who started codeexec"
	case c.PrincipalsFile != "":
		return false, "a client that holds a principal's token (CODE_EXEC_PRINCIPALS_FILE) is taken for an agent, which must not approve its own code (CODE_EXEC_APPROVAL_ELICIT=true makes its answers count)"
	case c.AuthToken == "":
		return true, "without CODE_EXEC_AUTH_TOKEN the HTTP transport listens on loopback only, for the clients of this machine's user"
	}
	return false, "a client that holds CODE_EXEC_AUTH_TOKEN is taken for an agent, which must not approve its own code (CODE_EXEC_APPROVAL_ELICIT=true makes its answers count)"
}

// AdminListens reports whether the approvals console listens when runs may
// need approval (CODE_EXEC_ADMIN_ADDR is not off).
func (c *Config) AdminListens() bool {
	return !strings.EqualFold(c.AdminAddr, "off") && c.AdminAddr != ""
}

// ValidateAdmin checks the approvals console's address: it must parse, and
// an address beyond loopback requires an admin token.
func (c *Config) ValidateAdmin() error {
	if strings.EqualFold(c.AdminAddr, "off") || c.AdminAddr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.AdminAddr)
	if err != nil {
		return Invalid("AdminAddr", c.AdminAddr, err.Error())
	}
	if !IsLoopback(host) && c.AdminToken == "" {
		return fmt.Errorf("refusing to serve the approvals console on %s without authentication: CODE_EXEC_ADMIN_ADDR is not a loopback address, so set CODE_EXEC_ADMIN_TOKEN or use 127.0.0.1", c.AdminAddr)
	}
	return nil
}

// ValidateMetrics checks the metrics listener's address: empty is off; it
// must parse, and an address beyond loopback requires a metrics token.
func (c *Config) ValidateMetrics() error {
	if c.MetricsAddr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.MetricsAddr)
	if err != nil {
		return Invalid("MetricsAddr", c.MetricsAddr, err.Error())
	}
	if !IsLoopback(host) && c.MetricsToken == "" {
		return fmt.Errorf("refusing to serve metrics on %s without authentication: CODE_EXEC_METRICS_ADDR is not a loopback address, so set CODE_EXEC_METRICS_TOKEN (scrapers then send Authorization: Bearer <token>) or listen on 127.0.0.1", c.MetricsAddr)
	}
	return nil
}

// IsLoopback reports whether host (an IP or "localhost") is a loopback
// address. An empty host means every interface, which is not loopback.
func IsLoopback(host string) bool { return httpserve.IsLoopback(host) }

// RestrictedPython reports whether CODE_EXEC_PYTHON_POLICY=restricted.
func (c *Config) RestrictedPython() bool { return c.PythonPolicy == pypolicy.Name }

// Setting describes one variable for --help and docs/configuration.md.
type Setting struct {
	Name, Default, Accepted, Help string
}

// Settings lists every variable in declaration order.
func Settings() []Setting {
	t := reflect.TypeFor[Config]()
	out := make([]Setting, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		out = append(out, Setting{
			Name:     Prefix + f.Tag.Get("env"),
			Default:  f.Tag.Get("envDefault"),
			Accepted: f.Tag.Get("accepted"),
			Help:     f.Tag.Get("help"),
		})
	}
	return out
}

// HelpWidth is the most columns a line of --help takes.
const HelpWidth = 100

// WriteHelp writes the settings of --help, one block each: the name and
// its default, then what it does and the values it accepts, wrapped to
// HelpWidth columns.
func WriteHelp(w io.Writer) {
	const indent = "      "
	for _, s := range Settings() {
		def := s.Default
		if def == "" {
			def = "(empty)"
		}
		if head := "  " + s.Name + "   default: " + def; len(head) <= HelpWidth {
			fmt.Fprintln(w, head)
		} else {
			fmt.Fprintln(w, "  "+s.Name)
			wrap(w, indent+"default: ", indent+"  ", def, HelpWidth)
		}
		wrap(w, indent, indent, s.Help, HelpWidth)
		wrap(w, indent+"accepted: ", indent+"  ", s.Accepted, HelpWidth)
	}
}

// wrap writes text to w in lines of at most width columns, the first
// after first and the others after indent, breaking at spaces (and, in a
// word too long for a line, such as a comma-separated list, after its
// commas).
func wrap(w io.Writer, first, indent, text string, width int) {
	line, empty := first, true
	for _, word := range strings.Fields(text) {
		for i, part := range splitAfterCommas(word, width-max(len(first), len(indent))) {
			sep := " "
			if empty || i > 0 {
				sep = ""
			}
			if !empty && len(line)+len(sep)+len(part) > width {
				fmt.Fprintln(w, line)
				line, sep = indent, ""
			}
			line += sep + part
			empty = false
		}
	}
	if !empty {
		fmt.Fprintln(w, line)
	}
}

// splitAfterCommas returns word whole when it has at most n characters,
// and otherwise in pieces of at most n that end after a comma where one is.
func splitAfterCommas(word string, n int) []string {
	var out []string
	for len(word) > n {
		cut := strings.LastIndex(word[:n], ",") + 1
		if cut == 0 {
			cut = n
		}
		out = append(out, word[:cut])
		word = word[cut:]
	}
	return append(out, word)
}
