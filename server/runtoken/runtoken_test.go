package runtoken

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/server/principals"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func principal() *principals.Principal {
	p := principals.Builtin("analytics-agent", principals.Defaults{})
	p.Org = "acme"
	return p
}

func TestIssueAndVerify(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, err := NewSigner(key, 0)
		if err != nil {
			t.Fatal(err)
		}
		tok, issued, err := s.Issue(principal(), "req_1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Verify(tok, key, time.Now())
		if err != nil {
			t.Fatalf("a fresh token: %v", err)
		}
		if c.Principal() != "analytics-agent" || c.Org != "acme" || c.RunID() != "req_1" || c.Issuer != "codeexec" {
			t.Errorf("claims: %+v", c)
		}
		if got := c.ExpiresAt.Sub(c.IssuedAt.Time); got != DefaultTTL {
			t.Errorf("a run of an hour gets a token for %s, want the default %s", got, DefaultTTL)
		}
		if !issued.ExpiresAt.Equal(c.ExpiresAt.Time) {
			t.Errorf("Issue says it expires at %s, the token %s", issued.ExpiresAt, c.ExpiresAt)
		}
		// Expired: at its expiry and after, on synctest's clock.
		time.Sleep(DefaultTTL)
		if _, err := Verify(tok, key, time.Now()); err == nil || err.Error() != "the token has expired" {
			t.Errorf("at its expiry: %v, want expired", err)
		}
	})
}

// TestNeverPastTheRun: a token expires at the end of its run's timeout
// when that comes before the TTL.
func TestNeverPastTheRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, _ := NewSigner(key, 10*time.Minute)
		tok, c, err := s.Issue(principal(), "r", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.ExpiresAt.Sub(time.Now()); got > 30*time.Second {
			t.Errorf("a run of 30 s gets a token for %s", got)
		}
		time.Sleep(30 * time.Second)
		if _, err := Verify(tok, key, time.Now()); err == nil {
			t.Error("the token is still valid when its run's timeout is over")
		}
	})
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	s, _ := NewSigner(key, 0)
	tok, _, err := s.Issue(principal(), "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := strings.Replace(string(payload), "analytics-agent", "admin-agent-xyz", 1)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + parts[2]
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	for _, c := range []struct {
		name, token string
		key         []byte
		want        string
	}{
		{"tampered", tampered, key, "the signature does not match"},
		{"other key", tok, []byte("another key of thirty-two bytes!"), "the signature does not match"},
		{"alg none", none, key, "HS256"},
		{"garbage", "not.a.jwt", key, "malformed"},
	} {
		if _, err := Verify(c.token, c.key, time.Now()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if _, err := NewSigner([]byte("short"), 0); err != ErrKey {
		t.Errorf("a short key: %v", err)
	}
}

// TestRunnerGivesTheRunItsToken: the layer puts the token in the run's
// environment, with the id its request has in the audit log, and leaves
// requests that run no code alone.
func TestRunnerGivesTheRunItsToken(t *testing.T) {
	t.Parallel()
	var got sandbox.Request
	s, _ := NewSigner(key, 0)
	r := Wrap(&sandboxtest.Fake{RunFunc: func(_ context.Context, req sandbox.Request) (*sandbox.Result, error) {
		got = req
		return &sandbox.Result{}, nil
	}}, s)
	ctx := approvals.WithDecided(principals.WithPrincipal(context.Background(), principal()), approvals.Decision{ID: "req_42"})
	req := sandbox.Request{Language: "python", Code: "print(1)", Env: []string{"A=1"}, Limits: sandbox.Limits{Timeout: time.Minute}}
	if _, err := r.Run(ctx, req); err != nil {
		t.Fatal(err)
	}
	if len(got.Env) != 2 || got.Env[0] != "A=1" || !strings.HasPrefix(got.Env[1], Variable+"=") {
		t.Fatalf("the run's environment: %q", got.Env)
	}
	c, err := Verify(strings.TrimPrefix(got.Env[1], Variable+"="), key, time.Now())
	if err != nil || c.RunID() != "req_42" || c.Principal() != "analytics-agent" {
		t.Errorf("the run's token: %+v, %v", c, err)
	}
	if len(req.Env) != 1 {
		t.Error("the layer changed the caller's request")
	}
	if _, err := r.Run(principals.WithPrincipal(context.Background(), principal()), req); err != nil {
		t.Fatal(err)
	}
	c, _ = Verify(strings.TrimPrefix(got.Env[1], Variable+"="), key, time.Now())
	if !strings.HasPrefix(c.RunID(), "run_") {
		t.Errorf("a run without an audit id got run id %q", c.RunID())
	}
	if _, err := r.Run(context.Background(), req); err == nil {
		t.Error("a run without a principal got a token")
	}
	got = sandbox.Request{}
	if _, err := r.Run(ctx, sandbox.Request{Language: "python", NewSession: &sandbox.NewSession{}}); err != nil || got.Env != nil {
		t.Errorf("a session's creation: %v, env %q", err, got.Env)
	}
}
