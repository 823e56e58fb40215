package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/server/principals"
)

const hashA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func writePrincipals(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "principals.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrincipalsAreCheckedAtStart: a principals file or setting that the
// server refuses stops it at start as a configuration error, in one line
// that names what is wrong.
func TestPrincipalsAreCheckedAtStart(t *testing.T) {
	t.Parallel()
	over := writePrincipals(t, "principals:\n  - name: agent\n    token_sha256: "+hashA+"\n    max_timeout: 2h\n")
	good := writePrincipals(t, "principals:\n  - name: agent\n    token_sha256: "+hashA+"\n")
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"over a cap", []string{"CODE_EXEC_PRINCIPALS_FILE=" + over, "CODE_EXEC_TRANSPORT=http"}, nil,
			`CODE_EXEC_PRINCIPALS_FILE ` + over + `: principal "agent" (line 4): field max_timeout: 2h0m0s is above the server's cap CODE_EXEC_MAX_TIMEOUT=1m0s`},
		{"missing", []string{"CODE_EXEC_PRINCIPALS_FILE=/nonexistent/principals.yaml", "CODE_EXEC_TRANSPORT=http"}, nil, "no such file"},
		{"stdio", []string{"CODE_EXEC_PRINCIPALS_FILE=" + good}, nil, "CODE_EXEC_PRINCIPALS_FILE is set but the transport is stdio"},
		{"stdio by flag", []string{"CODE_EXEC_PRINCIPALS_FILE=" + good, "CODE_EXEC_TRANSPORT=http"}, []string{"--transport", "stdio"}, "the transport is stdio"},
		{"with the auth token", []string{"CODE_EXEC_PRINCIPALS_FILE=" + good, "CODE_EXEC_TRANSPORT=http", "CODE_EXEC_AUTH_TOKEN=0123456789abcdef"}, nil,
			"CODE_EXEC_AUTH_TOKEN and CODE_EXEC_PRINCIPALS_FILE are both set"},
		{"short key", []string{"CODE_EXEC_RUN_TOKEN_KEY=short"}, nil, "CODE_EXEC_RUN_TOKEN_KEY is too short (5 characters)"},
	} {
		var stdout, stderr bytes.Buffer
		cfg, status := configure(c.args, c.env, &stdout, &stderr)
		msg := stderr.String()
		if cfg != nil || status != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, c.want) {
			t.Errorf("%s: status %d, stderr %q; want 2 and one line saying %q", c.name, status, msg, c.want)
		}
	}
	// A principals file authenticates the clients of an address beyond
	// loopback as CODE_EXEC_AUTH_TOKEN does.
	var stdout, stderr bytes.Buffer
	if cfg, status := configure([]string{"--transport", "http", "--addr", "0.0.0.0:8080"}, []string{"CODE_EXEC_PRINCIPALS_FILE=" + good}, &stdout, &stderr); cfg == nil {
		t.Errorf("a principals file beyond loopback: status %d, %q", status, stderr.String())
	}
}

// TestApprovalsFollowThePrincipals: the approval gate and console are on
// when a principal of the file asks for approval, even with
// CODE_EXEC_APPROVAL=never; such a file is refused where nobody can be
// asked.
func TestApprovalsFollowThePrincipals(t *testing.T) {
	t.Parallel()
	asks := writePrincipals(t, "principals:\n  - name: agent\n    token_sha256: "+hashA+"\n    approval: always\n")
	quiet := writePrincipals(t, "principals:\n  - name: agent\n    token_sha256: "+hashA+"\n")
	if on, err := approvalsNeeded(load(t, "CODE_EXEC_TRANSPORT=http", "CODE_EXEC_PRINCIPALS_FILE="+asks)); !on || err != nil {
		t.Errorf("a principal with approval always: %v, %v", on, err)
	}
	if on, err := approvalsNeeded(load(t, "CODE_EXEC_TRANSPORT=http", "CODE_EXEC_PRINCIPALS_FILE="+quiet)); on || err != nil {
		t.Errorf("no principal asks: %v, %v", on, err)
	}
	if on, _ := approvalsNeeded(load(t, "CODE_EXEC_APPROVAL=risky")); !on {
		t.Error("CODE_EXEC_APPROVAL=risky needs no approvals")
	}
	cfg := load(t, "CODE_EXEC_TRANSPORT=http", "CODE_EXEC_PRINCIPALS_FILE="+asks, "CODE_EXEC_ADMIN_ADDR=off")
	if _, err := newPrincipals(cfg, true, nil, discard()); err == nil || !strings.Contains(err.Error(), "this server can ask nobody") {
		t.Errorf("a principal that asks, without a console: %v", err)
	}
	// Clients' answers counting is not enough without the gate (a
	// reload on a server started without it).
	elicit := load(t, "CODE_EXEC_TRANSPORT=http", "CODE_EXEC_PRINCIPALS_FILE="+asks, "CODE_EXEC_APPROVAL_ELICIT=true")
	if _, err := newPrincipals(elicit, false, nil, discard()); err == nil || !strings.Contains(err.Error(), "this server can ask nobody") {
		t.Errorf("a principal that asks, on a server without the gate: %v", err)
	}
	reg, err := newPrincipals(load(t, "CODE_EXEC_TRANSPORT=http", "CODE_EXEC_PRINCIPALS_FILE="+asks), true, nil, discard())
	if err != nil {
		t.Fatal(err)
	}
	if p := reg.List()[0]; p.Policy.Approval != approvals.PolicyAlways {
		t.Errorf("the principal's approval: %s", p.Policy.Approval)
	}
}

// TestBuiltinPrincipals: without a file, stdio and HTTP without a token are
// the principal local, whom every request is; HTTP with
// CODE_EXEC_AUTH_TOKEN is default, whom only that token authenticates.
func TestBuiltinPrincipals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env     []string
		token   string
		present bool
		want    string
	}{
		{nil, "", false, principals.LocalName},
		{[]string{"CODE_EXEC_TRANSPORT=http"}, "", false, principals.LocalName},
		{[]string{"CODE_EXEC_TRANSPORT=http", "CODE_EXEC_AUTH_TOKEN=0123456789abcdef"}, "0123456789abcdef", true, principals.DefaultName},
		{[]string{"CODE_EXEC_TRANSPORT=http", "CODE_EXEC_AUTH_TOKEN=0123456789abcdef"}, "other", true, ""},
	} {
		reg, err := newPrincipals(load(t, c.env...), false, nil, discard())
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if p, ok := reg.Authenticate(c.token, c.present); ok {
			got = p.Name
		}
		if got != c.want {
			t.Errorf("%v with %q: %q, want %q", c.env, c.token, got, c.want)
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
