package principals

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// hashOf is the token_sha256 of token.
func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// testDefaults are server-wide settings with a network allowlist,
// packages, sessions and a person to ask.
func testDefaults(t *testing.T) Defaults {
	t.Helper()
	allow, err := egress.ParseAllowlist([]string{"api.example.com:443", "*.example.org", "files.example.net"})
	if err != nil {
		t.Fatal(err)
	}
	return Defaults{
		Languages: []string{"python", "javascript", "bash"}, Allowlist: allow, Packages: true, MaxSessions: 8,
		Approval: approvals.PolicyNever, ApprovalAvailable: true, MaxTimeout: time.Minute, Memory: 256 << 20, CPUs: 1, MaxConcurrency: 4,
	}
}

func TestParseResolvesEveryFieldAndFallsBack(t *testing.T) {
	t.Parallel()
	d := testDefaults(t)
	file := `principals:
  - name: analytics-agent
    org: acme
    token_sha256: ` + strings.ToUpper(hashOf("token-a")) + `
    languages: [py]
    network: allowlist
    network_allow: ["api.example.com:443", "*.api.example.org"]
    files: ro
    packages: false
    max_sessions: 2
    approval: risky
    max_timeout: 30s
    memory: 128m
    cpus: 0.5
    max_concurrent: 2
    runs_per_minute: 60
  - name: ci
    token_sha256: ` + hashOf("token-b") + `
`
	list, err := Parse([]byte(file), d)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("got %d principals, want 2", len(list))
	}
	a, b := list[0], list[1]
	if a.Name != "analytics-agent" || a.Org != "acme" || a.token != sha256.Sum256([]byte("token-a")) {
		t.Errorf("first principal: %q %q, token hash %x", a.Name, a.Org, a.token)
	}
	pa := a.Policy
	if strings.Join(pa.Languages, ",") != "python" || pa.Files != FilesRead || pa.Packages || pa.MaxSessions != 2 ||
		pa.Approval != approvals.PolicyRisky || pa.MaxTimeout != 30*time.Second || pa.Memory != 128<<20 || pa.CPUs != 0.5 ||
		pa.MaxConcurrent != 2 || pa.RunsPerMinute != 60 {
		t.Errorf("first principal's policy: %+v", pa)
	}
	if got := strings.Join(pa.Network.Strings(), ","); got != "api.example.com:443,*.api.example.org" {
		t.Errorf("first principal's network: %q", got)
	}
	if !pa.Own("max_timeout") || !pa.Own("languages") {
		t.Errorf("the fields it set are not its own: %v", pa.own)
	}
	pb := b.Policy
	if strings.Join(pb.Languages, ",") != "python,javascript,bash" || pb.Network != nil || pb.Files != FilesWrite || !pb.Packages ||
		pb.MaxSessions != 8 || pb.Approval != approvals.PolicyNever || pb.MaxTimeout != time.Minute || pb.Memory != 256<<20 ||
		pb.CPUs != 1 || pb.MaxConcurrent != 0 || pb.RunsPerMinute != 0 {
		t.Errorf("a principal that sets nothing gets other than the server-wide settings: %+v", pb)
	}
	if pb.Own("max_timeout") || b.Org != "" {
		t.Errorf("second principal: own %v, org %q", pb.own, b.Org)
	}
	if a.NetworkName() != "allowlist api.example.com:443,*.api.example.org" || b.NetworkName() != "the server's" {
		t.Errorf("network names: %q, %q", a.NetworkName(), b.NetworkName())
	}
}

func TestParseNetworkNone(t *testing.T) {
	t.Parallel()
	list, err := Parse([]byte("principals:\n  - name: a\n    token_sha256: "+hashOf("t")+"\n    network: none\n"), testDefaults(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := list[0].Policy.Network; n == nil || len(n.Rules()) != 0 || list[0].NetworkName() != "none" {
		t.Errorf("network none is %v (%q), want an empty allowlist", n, list[0].NetworkName())
	}
}

// TestParseRefusesWithOneLine: every file the server must refuse is
// refused with one line that names the principal, the field and the line.
func TestParseRefusesWithOneLine(t *testing.T) {
	t.Parallel()
	d := testDefaults(t)
	noNet := d
	noNet.Allowlist = nil
	noPkgs := d
	noPkgs.Packages = false
	nobody := d
	nobody.ApprovalAvailable = false
	always := d
	always.Approval = approvals.PolicyAlways
	roWorkspace, rwWorkspace := d, d
	roWorkspace.Workspace = &sandbox.Workspace{Dir: "/srv/project"}
	rwWorkspace.Workspace = &sandbox.Workspace{Dir: "/srv/project", Writable: true}
	h, h2 := hashOf("token-a"), hashOf("token-b")
	one := func(extra string) string {
		return "principals:\n  - name: agent\n    token_sha256: " + h + "\n" + extra
	}
	for _, c := range []struct {
		name, file string
		d          Defaults
		want       []string
	}{
		{"unknown field", one("    languagez: [python]\n"), d, []string{`principal "agent" (line 4): field languagez: unknown field`}},
		{"unknown top key", "principal:\n  - name: a\n", d, []string{`line 1: unknown key "principal" at the top`}},
		{"not yaml", "principals: [\n", d, []string{"not valid YAML"}},
		{"empty", "", d, []string{"the file is empty"}},
		{"no principals", "principals: []\n", d, []string{"principals is empty"}},
		{"hash too short", "principals:\n  - name: agent\n    token_sha256: 9f86d08\n", d, []string{`principal "agent" (line 3): field token_sha256: "9f86d08" is not a SHA-256`}},
		{"hash not hex", "principals:\n  - name: agent\n    token_sha256: " + strings.Repeat("z", 64) + "\n", d, []string{`field token_sha256`, "is not a SHA-256"}},
		{"no hash", "principals:\n  - name: agent\n", d, []string{`principal "agent" (line 2): field token_sha256: required`}},
		{"no name", "principals:\n  - token_sha256: " + h + "\n", d, []string{`principal #1 (line 2): field name: required`}},
		{"bad name", "principals:\n  - name: \"a b\"\n    token_sha256: " + h + "\n", d, []string{`field name: "a b" is not a name`}},
		{"duplicate name", one("  - name: agent\n    token_sha256: " + h2 + "\n"), d, []string{`principal "agent" (line 4): field name: the name is already that of the principal at line 2`}},
		{"duplicate hash", one("  - name: other\n    token_sha256: " + h + "\n"), d, []string{`principal "other" (line 4): field token_sha256: the same token hash as principal "agent"`}},
		{"field twice", one("    org: a\n    org: b\n"), d, []string{`principal "agent" (line 5): field org: given twice`}},
		{"language not offered", one("    languages: [python, ruby]\n"), d, []string{`field languages: "ruby" is not a language`}},
		{"language off on server", one("    languages: [bash]\n"), Defaults{Languages: []string{"python"}, MaxTimeout: time.Minute, Memory: 1 << 30, CPUs: 1, MaxConcurrency: 1}, []string{`field languages: bash is not among the server's languages (CODE_EXEC_LANGUAGES=python)`}},
		{"languages empty", one("    languages: []\n"), d, []string{"field languages: the list is empty"}},
		{"languages not a list", one("    languages: python\n"), d, []string{"field languages: want a list"}},
		{"network above none", one("    network: allowlist\n"), noNet, []string{"field network: allowlist is above the server's setting CODE_EXEC_NETWORK=none"}},
		{"network allow without server", one("    network_allow: [api.example.com]\n"), noNet, []string{"field network_allow: the server's CODE_EXEC_NETWORK is none"}},
		{"network allow not a subset", one("    network_allow: [evil.example.com]\n"), d, []string{"field network_allow: evil.example.com is not within the server's allowlist"}},
		{"network allow other port", one("    network_allow: [\"api.example.com:80\"]\n"), d, []string{"field network_allow: api.example.com:80 is not within"}},
		{"wildcard not covered by a host", one("    network_allow: [\"*.example.net\"]\n"), d, []string{"field network_allow: *.example.net is not within"}},
		{"network none with allow", one("    network: none\n    network_allow: [api.example.com]\n"), d, []string{"field network_allow: network is none"}},
		{"network bad", one("    network: open\n"), d, []string{`field network: "open" is not a network policy`}},
		{"network allow empty", one("    network_allow: []\n"), d, []string{"field network_allow: the list is empty"}},
		{"files bad", one("    files: write\n"), d, []string{`field files: "write" is not a file access`}},
		{"files none with workspace", one("    files: none\n"), roWorkspace, []string{"field files: none would keep the server's workspace"}},
		{"files ro with rw workspace", one("    files: ro\n"), rwWorkspace, []string{"field files: ro would make the server's writable workspace"}},
		{"packages above", one("    packages: true\n"), noPkgs, []string{"field packages: true is above the server's setting CODE_EXEC_PACKAGES=false"}},
		{"packages not bool", one("    packages: yes\n"), d, []string{`field packages: "yes" is not true or false`}},
		{"sessions above", one("    max_sessions: 9\n"), d, []string{"field max_sessions: 9 is above the server's cap CODE_EXEC_MAX_SESSIONS=8"}},
		{"sessions negative", one("    max_sessions: -1\n"), d, []string{`field max_sessions: "-1" is not a whole number`}},
		{"approval looser", one("    approval: risky\n"), always, []string{"field approval: risky asks a person less often than the server's CODE_EXEC_APPROVAL=always"}},
		{"approval nobody", one("    approval: always\n"), nobody, []string{"field approval: always needs a person to answer"}},
		{"approval bad", one("    approval: sometimes\n"), d, []string{`field approval: "sometimes" is not a policy`}},
		{"timeout above", one("    max_timeout: 2m\n"), d, []string{"field max_timeout: 2m0s is above the server's cap CODE_EXEC_MAX_TIMEOUT=1m0s"}},
		{"timeout bad", one("    max_timeout: 10\n"), d, []string{`field max_timeout: "10" is not a duration`}},
		{"memory above", one("    memory: 1g\n"), d, []string{"field memory: 1g is above the server's cap CODE_EXEC_MEMORY"}},
		{"memory below", one("    memory: 1m\n"), d, []string{"field memory: 1m is below the least a run may have"}},
		{"memory bad", one("    memory: lots\n"), d, []string{`field memory: "lots" is not a byte size`}},
		{"cpus above", one("    cpus: 2\n"), d, []string{"field cpus: 2 is above the server's cap CODE_EXEC_CPUS=1"}},
		{"cpus zero", one("    cpus: 0\n"), d, []string{"field cpus: 0 is not a number of CPUs above 0"}},
		{"concurrency above", one("    max_concurrent: 5\n"), d, []string{"field max_concurrent: 5 is above the server's cap CODE_EXEC_MAX_CONCURRENCY=4"}},
		{"concurrency zero", one("    max_concurrent: 0\n"), d, []string{`field max_concurrent: "0" is not a whole number from 1`}},
		{"rate zero", one("    runs_per_minute: 0\n"), d, []string{`field runs_per_minute: "0" is not a whole number from 1`}},
		{"principal not a mapping", "principals:\n  - agent\n", d, []string{"principal #1 (line 2): a principal is a mapping"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(c.file), c.d)
			if err == nil {
				t.Fatalf("the file was accepted:\n%s", c.file)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("the error is more than one line: %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the error %q does not say %q", msg, w)
				}
			}
			if strings.Contains(msg, "token-a") {
				t.Errorf("the error names a token: %q", msg)
			}
		})
	}
}

func TestParseAcceptsWhatFitsTheWorkspace(t *testing.T) {
	t.Parallel()
	d := testDefaults(t)
	d.Workspace = &sandbox.Workspace{Dir: "/srv/project"}
	if _, err := Parse([]byte("principals:\n  - name: a\n    token_sha256: "+hashOf("t")+"\n    files: ro\n"), d); err != nil {
		t.Errorf("files: ro with a read-only workspace was refused: %v", err)
	}
}
