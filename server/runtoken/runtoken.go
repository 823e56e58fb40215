// Package runtoken gives each run a short-lived credential: a JWT, signed
// with the operator's key (CODE_EXEC_RUN_TOKEN_KEY, HMAC-SHA256), that
// names the principal on whose behalf the run goes, its organisation, the
// run's id and an expiry no later than the run's own end. A run finds it
// in its environment (Variable), and may hand it to an API of the
// operator's, which verifies it with the same key (Verify, or any JWT
// library: HS256, issuer "codeexec") to know who the sandbox calls for.
//
// The token is the only credential of the server that reaches a run, and it
// is worth nothing once the run is over: the key itself never leaves the
// server.
package runtoken

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/server/principals"
)

// Variable is the environment variable that holds a run's token.
const Variable = "CODEEXEC_RUN_TOKEN"

// Issuer is the "iss" of every token.
const Issuer = "codeexec"

// DefaultTTL is how long a token is valid at most (CODE_EXEC_RUN_TOKEN_TTL).
const DefaultTTL = 5 * time.Minute

// MinKeyBytes is the shortest key accepted.
const MinKeyBytes = 32

// Claims are what a token says: JWT's registered claims (iss, sub: the
// principal, jti: the run id, iat, exp) and the principal's organisation.
type Claims struct {
	// Org is the principal's organisation ("" when it has none).
	Org string `json:"org,omitempty"`
	jwt.RegisteredClaims
}

// Principal is the principal the run goes on behalf of (sub).
func (c Claims) Principal() string { return c.Subject }

// RunID is the run's id (jti): the id of its request in the audit log
// (CODE_EXEC_AUDIT_LOG) when there is one.
func (c Claims) RunID() string { return c.ID }

// ErrKey: the key is too short.
var ErrKey = fmt.Errorf("a run token key needs at least %d bytes", MinKeyBytes)

// Signer issues tokens with one key. It is safe for concurrent use.
type Signer struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

// NewSigner returns a Signer of tokens valid for ttl at most (DefaultTTL
// when 0), or ErrKey.
func NewSigner(key []byte, ttl time.Duration) (*Signer, error) {
	if len(key) < MinKeyBytes {
		return nil, ErrKey
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Signer{key: append([]byte(nil), key...), ttl: ttl, now: time.Now}, nil
}

// TTL is how long a token is valid at most.
func (s *Signer) TTL() time.Duration { return s.ttl }

// Issue returns the token of a run of principal p, with id runID and a
// timeout of timeout: it expires after the Signer's TTL or at the end of
// the timeout, whichever comes first.
func (s *Signer) Issue(p *principals.Principal, runID string, timeout time.Duration) (string, Claims, error) {
	now := s.now()
	life := s.ttl
	if timeout > 0 && timeout < life {
		life = timeout
	}
	c := Claims{Org: p.Org, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: Issuer, Subject: p.Name, ID: runID,
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		// JWT dates are whole seconds: round down, never past the end.
		ExpiresAt: jwt.NewNumericDate(now.Add(life).Truncate(time.Second)),
	}}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.key)
	return tok, c, err
}

// Verify checks a token with key at the time now: it must be signed with
// HS256 and key, issued by codeexec, name a principal and a run, and be
// within its validity (no leeway). It returns the claims, or an error that
// says in a few words what is wrong.
func Verify(token string, key []byte, now time.Time) (Claims, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(Issuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	switch {
	case err != nil && errors.Is(err, jwt.ErrTokenSignatureInvalid) && algOf(token) != jwt.SigningMethodHS256.Alg():
		return c, fmt.Errorf("the token is not signed with HS256 (its alg is %q)", algOf(token))
	case err != nil:
		return c, describe(err)
	case c.Subject == "":
		return c, errors.New("the token names no principal")
	case c.ID == "":
		return c, errors.New("the token names no run")
	}
	return c, nil
}

// algOf is the alg of a token's header, unverified.
func algOf(token string) string {
	t, _, err := jwt.NewParser().ParseUnverified(token, &Claims{})
	if err != nil {
		return ""
	}
	alg, _ := t.Header["alg"].(string)
	return alg
}

// describe says what jwt's error means.
func describe(err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return errors.New("the token has expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return errors.New("the token is not valid yet")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return errors.New("the signature does not match: the token was changed, or signed with another key")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return errors.New("the token is malformed: it is not a JWT")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return errors.New("the token was not issued by codeexec")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return errors.New("the token has no expiry")
	}
	return fmt.Errorf("the token is not valid: %v", err)
}

// Runner is the layer of the runner chain that gives each one-off run its
// token, in its environment (Variable), right before the mode's runner:
// issued when the run starts (after any approval, run slot and package
// install), for the principal of its context, with the id of its request
// in the audit log (approvals.Decided) or a fresh one. Calls in a session
// do not go through it (the session router takes them before), and get
// no token.
type Runner struct {
	next   sandbox.Runner
	signer *Signer
}

var _ sandbox.Runner = (*Runner)(nil)

// Wrap returns the run token layer in front of next. Closing it closes
// next.
func Wrap(next sandbox.Runner, s *Signer) *Runner { return &Runner{next: next, signer: s} }

// Run issues req's token and runs it on the next Runner. A request without
// a principal in its context is refused.
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if !req.RunsCode() {
		return r.next.Run(ctx, req)
	}
	p := principals.From(ctx)
	if p == nil {
		return nil, errors.New("runtoken: the request names no principal")
	}
	id := ""
	if d, ok := approvals.Decided(ctx); ok {
		id = d.ID
	}
	if id == "" {
		id = newRunID()
	}
	tok, _, err := r.signer.Issue(p, id, req.Limits.Timeout)
	if err != nil {
		return nil, fmt.Errorf("runtoken: signing the run's token: %w", err)
	}
	req.Env = append(append([]string(nil), req.Env...), Variable+"="+tok)
	return r.next.Run(ctx, req)
}

// Capabilities are the next Runner's.
func (r *Runner) Capabilities() sandbox.Capabilities { return r.next.Capabilities() }

// Close closes the next Runner.
func (r *Runner) Close() error { return r.next.Close() }

// newRunID is a fresh run id: 128 random bits.
func newRunID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "run_" + hex.EncodeToString(b)
}
