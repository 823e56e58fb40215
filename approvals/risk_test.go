package approvals

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want Policy
		ok   bool
	}{
		{"never", PolicyNever, true},
		{"always", PolicyAlways, true},
		{"risky", PolicyRisky, true},
		{" Risky ", PolicyRisky, true},
		{"", "", false},
		{"sometimes", "", false},
	} {
		got, err := ParsePolicy(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q, ok=%v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "never, always, risky") {
			t.Errorf("ParsePolicy(%q) error %q does not list the accepted values", c.in, err)
		}
	}
}

func TestPolicyRequires(t *testing.T) {
	t.Parallel()
	flagged := []Finding{{Category: CategoryNetwork, Reason: "network access"}}
	for _, c := range []struct {
		p        Policy
		findings []Finding
		want     bool
	}{
		{PolicyNever, nil, false},
		{PolicyNever, flagged, false},
		{PolicyAlways, nil, true},
		{PolicyAlways, flagged, true},
		{PolicyRisky, nil, false},
		{PolicyRisky, flagged, true},
		// A note that the code will be refused anyway is not a risk.
		{PolicyRisky, []Finding{Refused(1, `imports "os"`)}, false},
		{PolicyRisky, append([]Finding{Refused(1, `imports "os"`)}, flagged...), true},
		{PolicyAlways, []Finding{Refused(1, `imports "os"`)}, true},
		{Policy("bogus"), nil, true}, // fail closed
	} {
		if got := c.p.Requires(c.findings); got != c.want {
			t.Errorf("%q.Requires(%d findings) = %v, want %v", c.p, len(c.findings), got, c.want)
		}
	}
}

// assessCases are TestAssess's cases.
var assessCases = []struct {
	lang, code string
	want       []Category // categories flagged, in any order; nil means none
	reason     string     // a substring of some reason
}{
	// Harmless code is not flagged.
	{"python", "print(2**64)", nil, ""},
	{"python", "import re\nprint(re.compile('a+').match('aaa'))", nil, ""},
	{"python", "with open('data.txt') as f:\n    print(f.read())", nil, ""},
	{"javascript", "console.log([1,2,3].map(x => x * 2))", nil, ""},
	{"bash", "echo hello >&2\nfor i in 1 2 3; do echo $i; done 2>&1 > /dev/null", nil, ""},
	{"bash", "x=$((3 + 4)); echo \"$x\"", nil, ""},

	// python
	{"python", "import socket\ns = socket.socket()", []Category{CategoryNetwork}, `imports "socket" (line 1)`},
	{"python", "from urllib.request import urlopen\nurlopen('http://x')", []Category{CategoryNetwork}, "network access"},
	{"python", "import requests", []Category{CategoryNetwork}, `"requests"`},
	{"python", "import os, urllib.request", []Category{CategoryNetwork}, `imports "urllib`},
	{"python", "import subprocess\nsubprocess.run(['ls'])", []Category{CategorySubprocess}, "subprocess"},
	{"python", "import os\nos.system('id')", []Category{CategorySubprocess}, `"os.system"`},
	{"python", "import shutil\nshutil.rmtree('/tmp/x')", []Category{CategoryFiles}, "rmtree"},
	{"python", "import os\nos.remove('a')", []Category{CategoryFiles}, "os.remove"},
	{"python", "open('out.txt', 'w').write('x')", []Category{CategoryFiles}, "for writing"},
	{"python", "import os\nos.setuid(0)", []Category{CategoryPrivilege}, "os.setuid"},
	{"python", "import os\nos.chmod('f', 0o777)", []Category{CategoryPrivilege}, "os.chmod"},
	{"python", "import os\nprint(os.environ['HOME'])", []Category{CategorySecrets}, "os.environ"},
	{"python", "print(open('/root/.ssh/id_rsa').read())", []Category{CategorySecrets}, "credential file"},
	{"python", "eval('1+1')", []Category{CategoryDynamic}, `"eval"`},
	{"python", "exec(compile('print(1)', 'x', 'exec'))", []Category{CategoryDynamic}, "dynamically built code"},
	{"python", "__import__('os')", []Category{CategoryDynamic}, "__import__"},

	// javascript
	{"javascript", "const net = require('net')", []Category{CategoryNetwork}, `"net"`},
	{"javascript", "import https from 'node:https'", []Category{CategoryNetwork}, `"https"`},
	{"javascript", "fetch('https://example.com')", []Category{CategoryNetwork}, `"fetch"`},
	{"javascript", "const cp = require('child_process'); cp.execSync('id')", []Category{CategorySubprocess}, "child_process"},
	{"javascript", "require('fs').unlinkSync('/etc/hosts')", []Category{CategoryFiles}, "unlinkSync"},
	{"javascript", "fs.writeFileSync('x', 'y')", []Category{CategoryFiles}, "writeFileSync"},
	{"javascript", "process.setuid(0)", []Category{CategoryPrivilege}, "process.setuid"},
	{"javascript", "console.log(process.env.TOKEN)", []Category{CategorySecrets}, "process.env"},
	{"javascript", "eval('2+2')", []Category{CategoryDynamic}, `"eval"`},
	{"javascript", "new Function('return 1')()", []Category{CategoryDynamic}, "Function"},
	{"javascript", "require('vm').runInNewContext('1')", []Category{CategoryDynamic}, `"vm"`},

	// bash
	{"bash", "curl -s https://example.com", []Category{CategoryNetwork}, `"curl"`},
	{"bash", "exec 3<>/dev/tcp/10.0.0.1/80", []Category{CategoryNetwork, CategorySubprocess}, "tcp"},
	{"bash", "bash -c 'id'", []Category{CategorySubprocess}, "bash -c"},
	{"bash", "sleep 100 &", []Category{CategorySubprocess}, "&"},
	{"bash", "rm -rf /tmp/x", []Category{CategoryFiles}, `"rm"`},
	{"bash", "echo data > /etc/hosts", []Category{CategoryFiles}, "/etc/hosts"},
	{"bash", "sudo id", []Category{CategoryPrivilege}, `"sudo"`},
	{"bash", "chmod 777 file", []Category{CategoryPrivilege}, "chmod"},
	{"bash", "env", []Category{CategorySecrets}, `"env"`},
	{"bash", "echo $GITHUB_TOKEN", []Category{CategorySecrets}, "GITHUB_TOKEN"},
	{"bash", "cat ~/.aws/credentials", []Category{CategorySecrets}, "credential file"},
	{"bash", "cat $XDG_RUNTIME_DIR/codeexec/admin-127.0.0.1-8081.token", []Category{CategorySecrets}, "credential file"},
	{"bash", "eval \"$cmd\"", []Category{CategoryDynamic}, `"eval"`},
	{"bash", "echo aWQ= | base64 -d | sh", []Category{CategoryDynamic}, "pipes into"},
}

func TestAssess(t *testing.T) {
	t.Parallel()
	for _, c := range assessCases {
		t.Run(c.lang+"/"+c.code, func(t *testing.T) {
			t.Parallel()
			got := Assess(c.lang, c.code)
			var cats []Category
			for _, f := range got {
				if !slices.Contains(cats, f.Category) {
					cats = append(cats, f.Category)
				}
				if f.Reason == "" || f.Line < 1 {
					t.Errorf("finding without reason or line: %+v", f)
				}
			}
			for _, w := range c.want {
				if !slices.Contains(cats, w) {
					t.Errorf("Assess did not flag %s; findings: %q", w, Reasons(got))
				}
			}
			if c.want == nil && len(got) > 0 {
				t.Errorf("Assess flagged harmless code: %q", Reasons(got))
			}
			if c.reason != "" && !slices.ContainsFunc(got, func(f Finding) bool { return strings.Contains(f.Reason, c.reason) }) {
				t.Errorf("no reason mentions %q: %q", c.reason, Reasons(got))
			}
		})
	}
}

// The patterns compile on first use; compile every one here, so that a bad
// pattern fails the tests and never a run.
func TestRulesCompile(t *testing.T) {
	all := append([]rule(nil), commonRules...)
	for _, rs := range rules {
		all = append(all, rs...)
	}
	for _, rl := range all {
		if rl.p.re() == nil {
			t.Fatalf("rule %q did not compile", rl.what)
		}
	}
	for _, re := range []func() *regexp.Regexp{harmlessRedirect, urlRE.re, pairRE.re, devTCPRE.re, nameRE, codingRE} {
		_ = re()
	}
}
