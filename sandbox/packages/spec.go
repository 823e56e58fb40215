// Package packages installs the packages a run asks for (code_execute's
// packages argument) in an install phase of its own, caches the result on
// the host by a hash of (interpreter, language, exact list) and gives it to
// the run read-only.
//
// The parts:
//   - Parse checks and normalizes a request's specs before anything runs:
//     only registry names with pinned or ranged versions, never URLs, paths,
//     VCS links or options;
//   - Cache keeps installed lists in folders named by their key, evicts the
//     least recently used entries beyond its size cap (never one in use) and
//     installs a list once however many calls ask for it at the same time;
//   - an Installer fills a fresh folder: RunnerInstaller runs pip or npm in
//     a sandbox.Runner of the mode's own kind whose only reachable
//     destination is the package index (see IndexPolicy);
//   - Wrap is the layer around the mode's Runner that does all of it for a
//     Request with Packages and sets Request.PackageDir for the run, which
//     then runs under the usual network policy.
package packages

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MaxSpecs is the most packages one request may name.
const MaxSpecs = 32

// maxSpecLen bounds one spec.
const maxSpecLen = 214

// ErrInvalidSpec: a package spec was refused (see SpecError).
var ErrInvalidSpec = errors.New("invalid package spec")

// SpecError is a refused spec: which one and why.
type SpecError struct {
	Index  int
	Spec   string
	Reason string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("packages[%d] %q is refused: %s", e.Index, truncate(e.Spec, 60), e.Reason)
}

func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

var (
	// pipName is a PEP 508 distribution name.
	pipName = `[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?`
	// pipSpec: name, optional extras, optional version clauses
	// (==1.0, >=1,<2, ~=1.4, !=1.3, ==1.*), nothing else: no URL (@),
	// no environment marker (;), no option, no whitespace.
	pipSpec    = regexp.MustCompile(`^(` + pipName + `)(\[` + pipName + `(?:,` + pipName + `)*\])?((?:===|==|!=|<=|>=|~=|<|>)[A-Za-z0-9.*+!_-]+(?:,(?:===|==|!=|<=|>=|~=|<|>)[A-Za-z0-9.*+!_-]+)*)?$`)
	pipRunSeps = regexp.MustCompile(`[-_.]+`)
	// npmName is a registry package name, scoped or not (lower case, as
	// the registry requires of new packages).
	npmName = regexp.MustCompile(`^(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)
	// npmVersion is a version, range or dist-tag: 1.0.0, ^1.2, ~1.2.3,
	// >=1.0.0, 1.x, latest. No spaces (so no "a || b" or "1 - 2"), and no
	// leading ".", which npm reads as a folder (x@. and x@..).
	npmVersion = regexp.MustCompile(`^[A-Za-z0-9^~<>=*][A-Za-z0-9.^~<>=*+_-]*$`)
	// npmFileType is what npm-package-arg reads as a tarball on disk, in
	// a name or a version (its isFileType).
	npmFileType = regexp.MustCompile(`(?i)\.(?:tgz|tar\.gz|tar)$`)
)

// pipArchives are the endings that make pip read a requirement as an
// archive on disk ("pkg==1.0.zip", "x.tar"; its ARCHIVE_EXTENSIONS,
// compared without regard to case).
var pipArchives = []string{".zip", ".whl", ".tar.bz2", ".tbz", ".tar.gz", ".tgz", ".tar", ".tar.xz", ".txz", ".tlz", ".tar.lz", ".tar.lzma"}

// Parse checks the specs of a request in lang (python: pip requirement
// specifiers; javascript: npm package specs) and returns them normalized,
// sorted and without duplicates: the exact list a cache entry is for. A
// refused spec is a *SpecError (wrapping ErrInvalidSpec) that names it.
//
// Accepted, python: NAME, NAME[extra,...], NAME followed by version clauses
// joined by commas (==, !=, <=, >=, ~=, <, >, ===), for example
// "requests==2.31.0" or "numpy>=1.26,<2"; names normalized as PEP 503 does
// (lower case, runs of -_. as one -). javascript: NAME, @SCOPE/NAME, each
// optionally followed by @VERSION, where VERSION is a version, a range
// without spaces (^1.2.0, ~1.2, >=1.0.0, 1.x) or a dist-tag (latest).
// Everything else is refused: URLs and direct references (name @ url),
// local paths (also npm's x@. and x@.., a version that starts with "."),
// VCS and hosted-git links (git+..., github:, user/repo), archives that
// pip or npm would read from disk (x.tgz, x.tar, x@1.0.tgz,
// pkg==1.0.zip, x.whl), npm aliases (npm:), options (-e, --index-url, ...),
// environment markers, whitespace and control characters, and names with
// path separators. TestParseAgreesWithTheInstallers asks pip and npm how
// they read every accepted form.
func Parse(lang string, specs []string) ([]string, error) {
	if len(specs) > MaxSpecs {
		return nil, fmt.Errorf("%w: %d packages asked for, at most %d per call", ErrInvalidSpec, len(specs), MaxSpecs)
	}
	var norm func(string) (string, string)
	switch lang {
	case "python":
		norm = normalizePip
	case "javascript":
		norm = normalizeNpm
	default:
		return nil, fmt.Errorf("%w: packages can be installed for python and javascript, not %s", ErrInvalidSpec, lang)
	}
	out := make([]string, 0, len(specs))
	for i, s := range specs {
		if reason := generalRefusal(s); reason != "" {
			return nil, &SpecError{Index: i, Spec: s, Reason: reason}
		}
		n, reason := norm(s)
		if reason != "" {
			return nil, &SpecError{Index: i, Spec: s, Reason: reason}
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// generalRefusal says why s cannot be a package spec in any language, or "".
func generalRefusal(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > maxSpecLen:
		return fmt.Sprintf("it is longer than %d characters", maxSpecLen)
	case strings.HasPrefix(s, "-"):
		return "options are not accepted, only package names with versions (the index is the operator's to choose)"
	case strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r > 0x7e }):
		return "it contains whitespace, control or non-ASCII characters"
	case strings.Contains(s, "://") || strings.HasPrefix(s, "git+") || strings.HasPrefix(s, "git:") || strings.HasPrefix(s, "file:"):
		return "URLs and VCS links are not accepted, only package names from the index"
	case strings.ContainsAny(s, `\`) || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~"):
		return "local paths are not accepted, only package names from the index"
	}
	return ""
}

// normalizePip normalizes a pip requirement specifier, or says why not.
func normalizePip(s string) (string, string) {
	// pip looks for an archive in the spec, and in the spec without the
	// extras at its end ("x.tar[a]" is the file x.tar).
	lower := strings.ToLower(s)
	withoutExtras := lower
	if i := strings.IndexByte(lower, '['); i > 0 && strings.HasSuffix(lower, "]") {
		withoutExtras = lower[:i]
	}
	for _, ext := range pipArchives {
		if strings.HasSuffix(lower, ext) || strings.HasSuffix(withoutExtras, ext) {
			return "", fmt.Sprintf("pip reads a requirement ending in %s as an archive on disk: archives and files are not accepted, only package names from the index", ext)
		}
	}
	m := pipSpec.FindStringSubmatch(s)
	if m == nil {
		switch {
		case strings.ContainsAny(s, "/"):
			return "", "names with path separators, paths and URLs are not accepted"
		case strings.Contains(s, "@"):
			return "", "direct references (name @ url) are not accepted, only versions such as name==1.0"
		case strings.Contains(s, ";"):
			return "", "environment markers are not accepted"
		}
		return "", "not a requirement such as name, name==1.0 or name>=1,<2"
	}
	name := strings.ToLower(pipRunSeps.ReplaceAllString(m[1], "-"))
	extras := strings.ToLower(m[2])
	return name + extras + m[3], ""
}

// normalizeNpm checks an npm spec, or says why not. It splits the spec
// where npm-package-arg does (at the first "@" after a scope's), and
// accepts only what it then reads as a registry name with a version, range
// or tag: never a folder (x@., x@..), a tarball (x.tar, x@1.0.tgz), a URL,
// a git or hosted-git link, or an alias.
func normalizeNpm(s string) (string, string) {
	name, version := s, ""
	if i := strings.Index(s[1:], "@") + 1; i > 0 {
		name, version = s[:i], s[i+1:]
		if version == "" {
			return "", "an empty version after @"
		}
	}
	switch {
	case strings.HasPrefix(version, "npm:") || strings.Contains(s, "npm:"):
		return "", "npm aliases (npm:) are not accepted"
	case npmFileType.MatchString(name) || npmFileType.MatchString(version):
		return "", "npm reads a name or version ending in .tgz, .tar.gz or .tar as a tarball on disk: tarballs are not accepted, only package names from the registry"
	case strings.HasPrefix(version, "."):
		return "", "npm reads a version starting with \".\" as a folder on disk: local paths are not accepted, only versions such as 1.0.0"
	case !npmName.MatchString(name):
		if strings.Count(name, "/") > 0 && !strings.HasPrefix(name, "@") {
			return "", "names with path separators (and GitHub shorthands user/repo) are not accepted"
		}
		return "", "not an npm package name such as left-pad or @scope/name (lower case)"
	case version != "" && !npmVersion.MatchString(version):
		return "", "not a version, range without spaces or tag, such as 1.0.0, ^1.2.0 or latest"
	}
	return s, ""
}
