package seatbelt_test

import (
	"testing"

	"github.com/codeexec/codeexec/sandbox/process/seatbelt"
)

// The evaluator follows Seatbelt's order: the last rule that matches
// decides; filters it does not model make a decision unknown unless both
// ways agree.
func TestEvaluate(t *testing.T) {
	const src = `(version 1)
(deny default (with message "tag"))
(allow file-read*)
(deny file-read* (subpath "/Users"))
(allow file-read* (subpath "/Users/alice/project"))
(allow file-read-metadata (vnode-type DIRECTORY))
(allow file-write* (require-all (subpath "/tmp") (require-not (literal "/tmp/keep"))))
(allow network-outbound (remote ip "localhost:8080"))
(allow network-outbound (remote unix-socket (path-literal "/var/run/ok.sock")))
(deny file-write-unlink (regex #"^/tmp/[0-9]+$"))
(allow mach-lookup (global-name "com.example.ok"))
`
	p, err := seatbelt.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		q    seatbelt.Query
		want seatbelt.Decision
	}{
		{seatbelt.Query{Op: "file-read-data", Path: "/etc/hosts"}, seatbelt.Allowed},
		{seatbelt.Query{Op: "file-read-data", Path: "/Users/alice/.ssh/id_rsa"}, seatbelt.Denied},
		{seatbelt.Query{Op: "file-read-data", Path: "/Users/alice/project/x"}, seatbelt.Allowed},
		{seatbelt.Query{Op: "file-read-data", Path: "/Users/alice/projects"}, seatbelt.Denied},
		// Whether /Users/alice is a directory is not modelled.
		{seatbelt.Query{Op: "file-read-metadata", Path: "/Users/alice"}, seatbelt.Unknown},
		// Both ways agree: allowed by the rule or by (allow file-read*).
		{seatbelt.Query{Op: "file-read-metadata", Path: "/etc"}, seatbelt.Allowed},
		{seatbelt.Query{Op: "file-write-create", Path: "/tmp/a"}, seatbelt.Allowed},
		{seatbelt.Query{Op: "file-write-create", Path: "/tmp/keep"}, seatbelt.Denied},
		{seatbelt.Query{Op: "file-write-create", Path: "/var/a"}, seatbelt.Denied},
		{seatbelt.Query{Op: "file-write-unlink", Path: "/tmp/123"}, seatbelt.Denied},
		{seatbelt.Query{Op: "file-write-unlink", Path: "/tmp/abc"}, seatbelt.Allowed},
		{seatbelt.Query{Op: "network-outbound", Remote: "127.0.0.1:8080"}, seatbelt.Allowed},
		{seatbelt.Query{Op: "network-outbound", Remote: "::1:8080"}, seatbelt.Allowed},
		{seatbelt.Query{Op: "network-outbound", Remote: "127.0.0.2:8080"}, seatbelt.Denied},
		{seatbelt.Query{Op: "network-outbound", Remote: "127.0.0.1:8081"}, seatbelt.Denied},
		{seatbelt.Query{Op: "network-outbound", Remote: "10.0.0.1:8080"}, seatbelt.Denied},
		// path-literal is not modelled: a socket path may match it.
		{seatbelt.Query{Op: "network-outbound", Path: "/var/run/docker.sock"}, seatbelt.Unknown},
		{seatbelt.Query{Op: "mach-lookup", Name: "com.example.ok"}, seatbelt.Allowed},
		{seatbelt.Query{Op: "mach-lookup", Name: "com.example.other"}, seatbelt.Denied},
		{seatbelt.Query{Op: "process-exec", Path: "/bin/sh"}, seatbelt.Denied},
	}
	for _, tt := range tests {
		if got := p.Evaluate(tt.q); got != tt.want {
			t.Errorf("%+v: %v, want %v", tt.q, got, tt.want)
		}
	}
}

// Without (deny default) what no rule matches is allowed, as in Seatbelt.
func TestEvaluateAllowByDefault(t *testing.T) {
	p, err := seatbelt.Parse(`(version 1) (deny network*)`)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Evaluate(seatbelt.Query{Op: "file-read-data", Path: "/x"}); d != seatbelt.Allowed {
		t.Errorf("no rule: %v", d)
	}
	if d := p.Evaluate(seatbelt.Query{Op: "network-outbound", Remote: "1.1.1.1:53"}); d != seatbelt.Denied {
		t.Errorf("network: %v", d)
	}
}

func TestParseErrors(t *testing.T) {
	for _, src := range []string{
		`(version 1) (allow file-read*`,
		`(version 1) (allow file-read*))`,
		`(version 2)`,
		`(import "system.sb")`,
		`(allow (subpath "/x"))`,
		`(allow file-read* (literal "/x))`,
		`"loose"`,
	} {
		if _, err := seatbelt.Parse(src); err == nil {
			t.Errorf("%q parsed", src)
		}
	}
}
