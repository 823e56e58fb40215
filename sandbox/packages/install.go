package packages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// Installer fills dir, a fresh empty host folder, with the packages specs
// (normalized by Parse) for lang. A failure of pip or npm themselves is an
// *InstallError with their output; any other error means the sandbox
// failed. Cancelling ctx stops the install. Install is safe for concurrent
// use.
type Installer interface {
	Install(ctx context.Context, lang string, specs []string, dir string) error
}

// ErrInstall: pip or npm could not install the packages (see InstallError).
var ErrInstall = errors.New("package install failed")

// InstallError is an install that ran and failed: why, and the tail of
// what the installer printed.
type InstallError struct {
	Tool   string // pip or npm
	Reason string // "exited with code 1", "timed out after 2m0s", ...
	Output string
}

func (e *InstallError) Error() string {
	msg := fmt.Sprintf("%s: %s %s", ErrInstall, e.Tool, e.Reason)
	if e.Output != "" {
		msg += "; its output ends with:\n" + e.Output
	}
	return msg
}

func (e *InstallError) Unwrap() error { return ErrInstall }

// outputTail is how much of the installer's output an InstallError keeps.
const outputTail = 2000

// Index names the package indexes the install phase may reach.
type Index struct {
	// PipURL is pip's index (PEP 503 simple API), for example
	// https://pypi.org/simple/.
	PipURL string
	// NpmURL is npm's registry, for example https://registry.npmjs.org/.
	NpmURL string
}

// ParseIndexURL checks an index URL (http or https, a host, no user
// information, query or fragment) and returns its host and port.
func ParseIndexURL(raw string) (host string, port int, err error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", 0, err
	case u.Scheme != "http" && u.Scheme != "https":
		return "", 0, fmt.Errorf("%q is not an http or https URL", raw)
	case u.Host == "" || u.Hostname() == "":
		return "", 0, fmt.Errorf("%q has no host", raw)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "", 0, fmt.Errorf("%q must not carry user information, a query or a fragment", raw)
	}
	port = 80
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		if port, err = egress.ParsePort(p); err != nil {
			return "", 0, fmt.Errorf("%q: %w", raw, err)
		}
	}
	return u.Hostname(), port, nil
}

// IndexPolicy is the egress policy of the install phase: exactly the
// host:port of each index URL and nothing else. The operator named these
// destinations, so they may be loopback or private addresses (a local
// mirror): AllowPrivate applies to them only, since nothing else is
// allowed. resolver pins names (nil: the system's); caps bound the phase.
func IndexPolicy(urls []string, resolver egress.Resolver, caps egress.Caps) (egress.Policy, error) {
	var entries []string
	for _, raw := range urls {
		if raw == "" {
			continue
		}
		host, port, err := ParseIndexURL(raw)
		if err != nil {
			return egress.Policy{}, err
		}
		if e := net.JoinHostPort(host, fmt.Sprint(port)); !slices.Contains(entries, e) {
			entries = append(entries, e)
		}
	}
	allow, err := egress.ParseAllowlist(entries)
	if err != nil {
		return egress.Policy{}, err
	}
	return egress.Policy{Allow: allow, AllowPrivate: true, Resolver: resolver, Caps: caps}, nil
}

// RunnerInstaller installs by running pip (python) or npm (javascript) as
// a program in Runner, a sandbox of the mode's own kind whose only
// reachable destination is the index (its egress proxy holds IndexPolicy),
// with the target folder given as a writable Request.PackageDir.
//
// pip installs with --only-binary=:all: (wheels only: no package code runs
// at install time) and resolves dependencies from the same index; npm
// installs with --ignore-scripts and resolves dependencies from the same
// registry.
type RunnerInstaller struct {
	Runner sandbox.Runner
	Index  Index
	// Limits bound one install (CODE_EXEC_PACKAGES_TIMEOUT and the
	// server's other limits).
	Limits sandbox.Limits
}

var _ Installer = (*RunnerInstaller)(nil)

// Close closes Runner.
func (in *RunnerInstaller) Close() error { return in.Runner.Close() }

// Install implements Installer.
func (in *RunnerInstaller) Install(ctx context.Context, lang string, specs []string, dir string) error {
	req := sandbox.Request{Language: lang, Limits: in.Limits, PackageDir: &sandbox.PackageDir{HostDir: dir, Writable: true}}
	tool := "pip"
	switch lang {
	case "python":
		if in.Index.PipURL == "" {
			return fmt.Errorf("%w: no pip index is configured (CODE_EXEC_PIP_INDEX_URL)", ErrInstall)
		}
		req.Code = pipProgram(in.Index.PipURL, specs)
	case "javascript":
		if in.Index.NpmURL == "" {
			return fmt.Errorf("%w: no npm registry is configured (CODE_EXEC_NPM_REGISTRY)", ErrInstall)
		}
		tool = "npm"
		req.Code = npmProgram(in.Index.NpmURL, specs)
	default:
		return fmt.Errorf("%w: packages can be installed for python and javascript, not %s", ErrInvalidSpec, lang)
	}
	res, err := in.Runner.Run(ctx, req)
	if err != nil {
		return fmt.Errorf("%s install: %w", tool, err)
	}
	var reason string
	switch {
	case res.TimedOut:
		reason = fmt.Sprintf("timed out after %s (CODE_EXEC_PACKAGES_TIMEOUT)", in.Limits.Timeout)
	case res.OOMKilled:
		reason = "ran out of memory"
	case res.Truncated:
		reason = "printed more than the output cap"
	case res.ExitCode != 0:
		reason = fmt.Sprintf("exited with code %d", res.ExitCode)
	default:
		return nil
	}
	out := strings.TrimSpace(res.Stdout + "\n" + res.Stderr)
	if len(out) > outputTail {
		out = "…" + out[len(out)-outputTail:]
	}
	return &InstallError{Tool: tool, Reason: reason, Output: out}
}

// jsonList writes specs as a JSON array, which python and javascript both
// read as a list of strings (specs are ASCII without quotes: see Parse).
func jsonList(v []string) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// pipProgram is the python program of the install phase: pip, run in the
// sandbox's interpreter, installing into the package folder.
func pipProgram(index string, specs []string) string {
	args := []string{"install", "--no-input", "--disable-pip-version-check", "--no-cache-dir", "--progress-bar", "off",
		"--only-binary", ":all:", "--index-url", index}
	if u, err := url.Parse(index); err == nil && u.Scheme == "http" {
		// pip ignores a plain-http index other than localhost unless told
		// to trust it; the operator chose it.
		args = append(args, "--trusted-host", u.Hostname())
	}
	return `import os, sys, runpy
target = os.environ["` + sandbox.PackagesVariable + `"]
proxy = os.environ.get("HTTPS_PROXY", "")
sys.argv = ["pip"] + ` + jsonList(args) + ` + ["--target", target] + (["--proxy", proxy] if proxy else []) + ["--"] + ` + jsonList(specs) + `
runpy.run_module("pip", run_name="__main__", alter_sys=True)
`
}

// npmProgram is the javascript program of the install phase: npm, run by
// the sandbox's node, installing into the package folder.
func npmProgram(registry string, specs []string) string {
	return `const { spawnSync } = require("child_process");
const prefix = process.env.` + sandbox.PackagesVariable + `;
const proxy = process.env.HTTPS_PROXY || "";
const args = ["install", "--prefix", prefix, "--registry", ` + jsonList([]string{registry})[1:len(jsonList([]string{registry}))-1] + `,
  "--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier", "--omit=dev", "--loglevel=error", "--logs-max=0",
  "--cache", require("os").tmpdir() + "/npm-cache"];
if (proxy) args.push("--proxy", proxy, "--https-proxy", proxy);
args.push("--", ...` + jsonList(specs) + `);
const r = spawnSync("npm", args, { stdio: "inherit" });
if (r.error) { console.error(String(r.error)); process.exit(127); }
process.exit(r.status === null ? 1 : r.status);
`
}

// DefaultCaps bound the install phase's use of the network when the
// operator's configuration gives no other: enough for a few hundred
// downloads of a large list.
var DefaultCaps = egress.Caps{Connections: 512, Bytes: 2 << 30, ConnectTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
