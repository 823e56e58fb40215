package seatbelt_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/process/seatbelt"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.sb and the table of refusals in docs/modes.md")

// The run of the examples: alice's laptop, python from pyenv in her home,
// her project as the workspace, and a run directory in her temporary
// folder (real paths, as Seatbelt sees them).
const (
	home      = "/Users/alice"
	runDir    = "/private/var/folders/7x/k2j9_abc/T/codeexec-2718/run-42"
	python    = "/Users/alice/.pyenv/versions/3.12.4"
	workspace = "/Users/alice/project"
	proxyPort = 50123
)

// policies are the cases whose profiles are kept in testdata.
var policies = map[string]seatbelt.Policy{
	// No network, no workspace: a run of the default configuration.
	"run": {ReadOnly: []string{python}, ReadWrite: []string{runDir}},
	// CODE_EXEC_WORKSPACE (read-only) and CODE_EXEC_NETWORK=allowlist.
	"workspace-ro-proxy": {ReadOnly: []string{python, workspace}, ReadWrite: []string{runDir}, ProxyPort: proxyPort},
	// CODE_EXEC_WORKSPACE_MODE=rw.
	"workspace-rw": {ReadOnly: []string{python}, ReadWrite: []string{runDir, workspace}},
}

// TestProfiles compares each generated profile with testdata/<case>.sb
// (go test ./sandbox/process/seatbelt -update rewrites them).
func TestProfiles(t *testing.T) {
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			got, err := p.Profile()
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join("testdata", name+".sb")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				g, w := strings.Split(got, "\n"), strings.Split(string(want), "\n")
				i := 0
				for i < len(g) && i < len(w) && g[i] == w[i] {
					i++
				}
				t.Errorf("the profile differs from %s at line %d: got %q, want %q (go test ./sandbox/process/seatbelt -update rewrites it)", file, i+1, at(g, i), at(w, i))
			}
			if _, err := seatbelt.Parse(got); err != nil {
				t.Fatalf("the profile does not parse: %v", err)
			}
		})
	}
}

func TestProfileRefusesBadPaths(t *testing.T) {
	for _, p := range []seatbelt.Policy{
		{ReadWrite: []string{"relative/dir"}},
		{ReadOnly: []string{"/Users/alice/../bob"}},
		{ReadOnly: []string{"/Users/alice/"}},
		{ReadWrite: []string{"/tmp/a\nb"}},
		{ReadWrite: []string{""}},
	} {
		if _, err := p.Profile(); !errors.Is(err, seatbelt.ErrBadPath) {
			t.Errorf("%+v: %v, want ErrBadPath", p, err)
		}
	}
	if _, err := (seatbelt.Policy{ProxyPort: 70000}).Profile(); err == nil {
		t.Error("port 70000 was accepted")
	}
}

// A path with quotes and backslashes is written as an SBPL string that
// reads back as the same path.
func TestProfileQuotesPaths(t *testing.T) {
	odd := `/Users/alice/a "quoted" \ folder`
	src, err := seatbelt.Policy{ReadWrite: []string{odd}}.Profile()
	if err != nil {
		t.Fatal(err)
	}
	p, err := seatbelt.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []seatbelt.Query{{Op: "file-write-create", Path: odd + "/x"}, {Op: "file-read-data", Path: odd}} {
		if d := p.Evaluate(q); d != seatbelt.Allowed {
			t.Errorf("%+v: %v", q, d)
		}
	}
	if d := p.Evaluate(seatbelt.Query{Op: "file-write-create", Path: `/Users/alice/a "quoted" `}); d != seatbelt.Denied {
		t.Errorf("a prefix of the odd path: %v", d)
	}
}

// attempt is one thing a program tries, as the docs write it: a verb and
// its object ("read ~/.ssh/id_ed25519", "write-existing /dev/null" (no
// creation), "connect 127.0.0.1:22",
// "connect-unix /private/var/run/docker.sock", "lookup
// com.apple.SecurityServer"); ~ is alice's home.
type attempt struct {
	what, try string
}

// queries are the Seatbelt operations that an attempt takes (writing a
// file creates it or writes into it, and so on): each must be refused for
// the attempt to be refused.
func (a attempt) queries(t *testing.T) []seatbelt.Query {
	verb, obj, ok := strings.Cut(a.try, " ")
	if !ok {
		t.Fatalf("bad attempt %q", a.try)
	}
	if rest, ok := strings.CutPrefix(obj, "~"); ok {
		obj = home + rest
	}
	switch verb {
	case "read":
		return []seatbelt.Query{{Op: "file-read-data", Path: obj}}
	case "list":
		return []seatbelt.Query{{Op: "file-read-data", Path: obj}}
	case "write":
		return []seatbelt.Query{{Op: "file-write-data", Path: obj}, {Op: "file-write-create", Path: obj}}
	case "write-existing":
		return []seatbelt.Query{{Op: "file-write-data", Path: obj}}
	case "delete":
		return []seatbelt.Query{{Op: "file-write-unlink", Path: obj}}
	case "exec":
		return []seatbelt.Query{{Op: "process-exec", Path: obj}, {Op: "file-read-data", Path: obj}}
	case "connect":
		return []seatbelt.Query{{Op: "network-outbound", Remote: obj}}
	case "connect-unix":
		return []seatbelt.Query{{Op: "network-outbound", Path: obj}}
	case "lookup":
		return []seatbelt.Query{{Op: "mach-lookup", Name: obj}}
	case "sysctl":
		return []seatbelt.Query{{Op: "sysctl-read", Name: obj}}
	}
	t.Fatalf("unknown verb in %q", a.try)
	return nil
}

// refused is what docs/modes.md promises that the profile of a run refuses
// (with the read-only workspace and the egress proxy: the profile that
// allows the most). TestRefusals checks each, and the docs' table is made
// from it.
var refused = []attempt{
	{"the user's SSH keys", "read ~/.ssh/id_ed25519"},
	{"cloud credentials", "read ~/.aws/credentials"},
	{"the keychain's files", "read ~/Library/Keychains/login.keychain-db"},
	{"the MCP client's configuration (and the secrets in it)", "read ~/Library/Application Support/Claude/claude_desktop_config.json"},
	{"the shell's history", "read ~/.zsh_history"},
	{"the home folder's contents", "list ~"},
	{"documents", "read ~/Documents/taxes.pdf"},
	{"another user's files", "read /Users/bob/notes.txt"},
	{"external and network volumes", "read /Volumes/Backup/photos.zip"},
	{"another run's directory", "read /private/var/folders/7x/k2j9_abc/T/codeexec-2718/run-43/main.py"},
	{"the user's temporary folder", "read /private/var/folders/7x/k2j9_abc/T/other-app/cache.db"},
	{"the shared temporary folder", "read /private/tmp/build.log"},
	{"the read-only workspace, written", "write ~/project/README.md"},
	{"the read-only workspace, deleted from", "delete ~/project/main.go"},
	{"the shell's start-up files", "write ~/.zshrc"},
	{"the user's launch agents", "write ~/Library/LaunchAgents/evil.plist"},
	{"the shared temporary folder, written", "write /private/tmp/payload"},
	{"the interpreter's own files", "write /Users/alice/.pyenv/versions/3.12.4/lib/python3.12/site.py"},
	{"the system's programs", "write /usr/local/bin/python3"},
	{"programs in the home folder", "exec ~/bin/tool"},
	{"the internet", "connect 93.184.216.34:443"},
	{"a service of the host", "connect 127.0.0.1:22"},
	{"a database on the host", "connect 127.0.0.1:5432"},
	{"a loopback port other than the proxy's", "connect 127.0.0.1:50124"},
	{"the host's IPv6 loopback", "connect [::1]:8080"},
	{"the local network", "connect 192.168.1.1:80"},
	{"the cloud metadata service", "connect 169.254.169.254:80"},
	{"the Docker Engine", "connect-unix /private/var/run/docker.sock"},
	{"Docker Desktop's socket", "connect-unix ~/.docker/run/docker.sock"},
	{"the ssh agent", "connect-unix /private/tmp/com.apple.launchd.x2Zq/Listeners"},
	{"name resolution (mDNSResponder)", "connect-unix /private/var/run/mDNSResponder"},
	{"the keychain's service", "lookup com.apple.SecurityServer"},
	{"the keychain's XPC service", "lookup com.apple.securityd.xpc"},
	{"the pasteboard (clipboard)", "lookup com.apple.pasteboard.1"},
	{"the window server (screen)", "lookup com.apple.windowserver.active"},
	{"name resolution (DNS service)", "lookup com.apple.dnssd.service"},
	{"other processes' arguments and environment (the server's secrets)", "sysctl kern.procargs2"},
}

// allowed are what a run needs: without them the refusals above prove
// nothing (a profile that refuses everything refuses them too).
var allowed = []attempt{
	{"its program", "read " + runDir + "/main.py"},
	{"its run directory", "write " + runDir + "/out.csv"},
	{"its run directory, deleted from", "delete " + runDir + "/tmp.txt"},
	{"the interpreter", "exec " + python + "/bin/python3.12"},
	{"the standard library", "read " + python + "/lib/python3.12/os.py"},
	{"the workspace", "read ~/project/data.csv"},
	{"the system's libraries", "read /usr/lib/libSystem.B.dylib"},
	{"the system's frameworks", "read /System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"},
	{"the system's certificates", "read /private/etc/ssl/cert.pem"},
	{"Homebrew's programs", "exec /opt/homebrew/bin/node"},
	{"the shell", "exec /bin/bash"},
	{"the egress proxy", "connect 127.0.0.1:50123"},
	{"/dev/null", "write-existing /dev/null"},
	{"the number of processors", "sysctl hw.ncpu"},
	{"user lookups", "lookup com.apple.system.opendirectoryd.libinfo"},
}

// TestRefusals checks, on the generated profile, every refusal that the
// docs promise and what a run needs.
func TestRefusals(t *testing.T) {
	src, err := policies["workspace-ro-proxy"].Profile()
	if err != nil {
		t.Fatal(err)
	}
	p, err := seatbelt.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range refused {
		for _, q := range a.queries(t) {
			if d := p.Evaluate(q); d != seatbelt.Denied {
				t.Errorf("%s (%s): %+v is %v, want denied", a.what, a.try, q, d)
			}
		}
	}
	for _, a := range allowed {
		for _, q := range a.queries(t) {
			if d := p.Evaluate(q); d != seatbelt.Allowed {
				t.Errorf("%s (%s): %+v is %v, want allowed", a.what, a.try, q, d)
			}
		}
	}
}

// Without the proxy no connection is allowed, the loopback's included;
// with a writable workspace, the workspace is written.
func TestNetworkAndWorkspaceModes(t *testing.T) {
	parse := func(name string) *seatbelt.Profile {
		src, err := policies[name].Profile()
		if err != nil {
			t.Fatal(err)
		}
		p, err := seatbelt.Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := parse("run")
	for _, remote := range []string{"127.0.0.1:50123", "127.0.0.1:3128", "93.184.216.34:443"} {
		if d := run.Evaluate(seatbelt.Query{Op: "network-outbound", Remote: remote}); d != seatbelt.Denied {
			t.Errorf("without the proxy, connect %s: %v", remote, d)
		}
	}
	if d := run.Evaluate(seatbelt.Query{Op: "file-read-data", Path: workspace + "/data.csv"}); d != seatbelt.Denied {
		t.Errorf("without a workspace, its files: %v", d)
	}
	rw := parse("workspace-rw")
	if d := rw.Evaluate(seatbelt.Query{Op: "file-write-create", Path: workspace + "/new.txt"}); d != seatbelt.Allowed {
		t.Errorf("a writable workspace: %v", d)
	}
	if d := rw.Evaluate(seatbelt.Query{Op: "file-write-create", Path: home + "/new.txt"}); d != seatbelt.Denied {
		t.Errorf("beside a writable workspace: %v", d)
	}
}

const (
	refusalsBegin = "<!-- seatbelt refusals: generated by go test ./sandbox/process/seatbelt -run TestDocsListTheRefusals -update -->\n"
	refusalsEnd   = "<!-- end of seatbelt refusals -->"
)

// TestDocsListTheRefusals keeps the table of docs/modes.md in step with
// the refusals that TestRefusals checks.
func TestDocsListTheRefusals(t *testing.T) {
	var b strings.Builder
	b.WriteString("| a program cannot reach | for example |\n| --- | --- |\n")
	for _, a := range refused {
		fmt.Fprintf(&b, "| %s | `%s` |\n", a.what, a.try)
	}
	sandboxtest.CheckDocBlock(t, "../../../docs/modes.md", refusalsBegin, refusalsEnd, b.String(), *update,
		"go test ./sandbox/process/seatbelt -run TestDocsListTheRefusals -update")
}

// at is line i of lines, or "" past the end.
func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return ""
}
