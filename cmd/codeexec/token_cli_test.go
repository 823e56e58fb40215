package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/codeexec/codeexec/server/principals"
	"github.com/codeexec/codeexec/server/runtoken"
)

// TestTokenVerify: codeexec token verify says whose run a valid token is,
// and refuses a tampered, expired or foreign one with one line, never
// printing the key.
func TestTokenVerify(t *testing.T) {
	t.Parallel()
	key := "0123456789abcdef0123456789abcdef-key"
	env := []string{"CODE_EXEC_RUN_TOKEN_KEY=" + key}
	s, err := runtoken.NewSigner([]byte(key), 0)
	if err != nil {
		t.Fatal(err)
	}
	p := principals.Builtin("analytics-agent", principals.Defaults{})
	p.Org = "acme"
	valid, _, err := s.Issue(p, "req_7", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := jwt.NewWithClaims(jwt.SigningMethodHS256, runtoken.Claims{Org: "acme", RegisteredClaims: jwt.RegisteredClaims{
		Issuer: runtoken.Issuer, Subject: "analytics-agent", ID: "req_8",
		IssuedAt: jwt.NewNumericDate(time.Now().Add(-10 * time.Minute)), ExpiresAt: jwt.NewNumericDate(time.Now().Add(-5 * time.Minute)),
	}}).SignedString([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	tampered := valid[:len(valid)-3] + map[bool]string{true: "AAA", false: "BBB"}[!strings.HasSuffix(valid, "AAA")]
	for _, c := range []struct {
		name  string
		args  []string
		env   []string
		code  int
		out   string
		error string
	}{
		{"valid", []string{"verify", valid}, env, 0, "valid: principal analytics-agent, org acme, run req_7, issued ", ""},
		{"tampered", []string{"verify", tampered}, env, 1, "", "codeexec token verify: not valid: the signature does not match"},
		{"expired", []string{"verify", expired}, env, 1, "", "codeexec token verify: not valid: the token has expired"},
		{"other key", []string{"verify", valid}, []string{"CODE_EXEC_RUN_TOKEN_KEY=another key of thirty-two characters"}, 1, "", "the signature does not match"},
		{"no key", []string{"verify", valid}, nil, 2, "", "CODE_EXEC_RUN_TOKEN_KEY is not set"},
		{"usage", []string{"check", valid}, env, 2, "", "Usage: codeexec token verify TOKEN"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"token"}, c.args...), c.env, nil, &stdout, &stderr)
		if code != c.code || !strings.HasPrefix(stdout.String(), c.out) || !strings.Contains(stderr.String(), c.error) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.name, code, stdout.String(), stderr.String(), c.code, c.out, c.error)
		}
		if strings.Contains(stdout.String()+stderr.String(), key) {
			t.Errorf("%s: the key was printed", c.name)
		}
		if n := strings.Count(stderr.String(), "\n"); n > 1 {
			t.Errorf("%s: %d lines on stderr", c.name, n)
		}
	}
}
