package approvals

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"time"
)

// Signer issues and redeems the state that an approval carries through an
// MCP client (the multi-round-trip requestState). The state names the
// request, the hash of its arguments, a single-use nonce and an expiry, and
// is signed with HMAC-SHA256, so that a client can neither make up an
// approval nor reuse one for other code or a second run.
//
// The key is random per Signer unless given, so a restart invalidates every
// outstanding approval. Nonces live in memory until they expire. A Signer is
// safe for concurrent use.
type Signer struct {
	key []byte
	now func() time.Time

	mu     sync.Mutex
	issued map[string]time.Time // nonce -> expiry, until redeemed
}

// NewSigner returns a Signer with key, or with 32 random bytes when key is empty.
func NewSigner(key []byte) *Signer {
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			panic("approvals: no randomness for the signing key: " + err.Error())
		}
	}
	return &Signer{key: key, now: time.Now, issued: map[string]time.Time{}}
}

type statePayload struct {
	V       int    `json:"v"`
	ID      string `json:"id"`
	Hash    string `json:"h"`
	Nonce   string `json:"n"`
	Expires int64  `json:"e"` // unix milliseconds
}

const statePrefix = "ce1."

// Issue returns a signed state for request id with hash, good once until expires.
func (s *Signer) Issue(id, hash string, expires time.Time) string {
	var n [16]byte
	_, _ = rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	p, _ := json.Marshal(statePayload{V: 1, ID: id, Hash: hash, Nonce: nonce, Expires: expires.UnixMilli()})
	body := base64.RawURLEncoding.EncodeToString(p)
	s.mu.Lock()
	s.purgeLocked()
	s.issued[nonce] = expires
	s.mu.Unlock()
	return statePrefix + body + "." + base64.RawURLEncoding.EncodeToString(s.mac(body))
}

func (s *Signer) mac(body string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(statePrefix + body))
	return m.Sum(nil)
}

// StateRequestID is the request id a state names, unchecked ("" when it
// is not a state): where replicas stand behind one address, the state goes
// back to the replica that issued it, which alone can redeem its nonce.
func StateRequestID(state string) string {
	body, _, _ := strings.Cut(strings.TrimPrefix(state, statePrefix), ".")
	raw, err := base64.RawURLEncoding.DecodeString(body)
	var p statePayload
	if err != nil || !strings.HasPrefix(state, statePrefix) || json.Unmarshal(raw, &p) != nil {
		return ""
	}
	return p.ID
}

// Redeem checks a state that came back with an answer for a request whose
// arguments hash to hash. It returns the request id the state was issued
// for ("" when the state is not this server's) and OutcomeApproved when the
// state is good, or the outcome that rejects it: OutcomeForged (not signed
// by this server, or issued for other arguments), OutcomeExpired, or
// OutcomeReplayed (already redeemed). A good or mismatched state is used up.
func (s *Signer) Redeem(state, hash string) (string, Outcome) {
	rest, ok := strings.CutPrefix(state, statePrefix)
	if !ok {
		return "", OutcomeForged
	}
	body, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return "", OutcomeForged
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(body)) {
		return "", OutcomeForged
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return "", OutcomeForged
	}
	var p statePayload
	if err := json.Unmarshal(raw, &p); err != nil || p.V != 1 {
		return "", OutcomeForged
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, fresh := s.issued[p.Nonce]
	delete(s.issued, p.Nonce)
	switch {
	case s.now().UnixMilli() > p.Expires:
		return p.ID, OutcomeExpired
	case !fresh:
		return p.ID, OutcomeReplayed
	case !hmac.Equal([]byte(p.Hash), []byte(hash)):
		return p.ID, OutcomeForged
	}
	return p.ID, OutcomeApproved
}

// purgeLocked forgets expired nonces. s.mu must be held.
func (s *Signer) purgeLocked() {
	now := s.now()
	for n, exp := range s.issued {
		if now.After(exp) {
			delete(s.issued, n)
		}
	}
}
