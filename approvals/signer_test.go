package approvals

import (
	"strings"
	"testing"
	"time"
)

func TestSigner(t *testing.T) {
	t.Parallel()
	s := NewSigner(nil)
	other := NewSigner(nil)
	future := time.Now().Add(time.Minute)
	const hash = "aaaa"

	t.Run("good once, then replayed", func(t *testing.T) {
		st := s.Issue("id1", hash, future)
		if id, o := s.Redeem(st, hash); id != "id1" || o != OutcomeApproved {
			t.Fatalf("first Redeem = %q, %q", id, o)
		}
		if id, o := s.Redeem(st, hash); id != "id1" || o != OutcomeReplayed {
			t.Fatalf("second Redeem = %q, %q; want replayed", id, o)
		}
	})
	t.Run("other code", func(t *testing.T) {
		st := s.Issue("id2", hash, future)
		if _, o := s.Redeem(st, "bbbb"); o != OutcomeForged {
			t.Fatalf("Redeem for other code = %q, want forged", o)
		}
		// The state is used up by the attempt.
		if _, o := s.Redeem(st, hash); o != OutcomeReplayed {
			t.Fatalf("Redeem after a mismatch = %q, want replayed", o)
		}
	})
	t.Run("expired", func(t *testing.T) {
		st := s.Issue("id3", hash, time.Now().Add(-time.Second))
		if _, o := s.Redeem(st, hash); o != OutcomeExpired {
			t.Fatalf("Redeem of an expired state = %q", o)
		}
	})
	t.Run("forged", func(t *testing.T) {
		st := s.Issue("id4", hash, future)
		body, sig, _ := strings.Cut(strings.TrimPrefix(st, statePrefix), ".")
		flipped := []byte(sig)
		flipped[0] ^= 1
		for name, bad := range map[string]string{
			"empty":          "",
			"garbage":        "approved",
			"other server":   other.Issue("id4", hash, future),
			"signature":      statePrefix + body + "." + string(flipped),
			"no signature":   statePrefix + body,
			"body changed":   statePrefix + body[:len(body)-2] + "AA." + sig,
			"prefix changed": "ce2." + body + "." + sig,
		} {
			if id, o := s.Redeem(bad, hash); o != OutcomeForged || id != "" {
				t.Errorf("%s: Redeem = %q, %q; want forged with no id", name, id, o)
			}
		}
		// The genuine state still works once.
		if _, o := s.Redeem(st, hash); o != OutcomeApproved {
			t.Fatalf("genuine state after forgeries = %q", o)
		}
	})
}

func TestStateRequestID(t *testing.T) {
	t.Parallel()
	s := NewSigner(nil)
	state := s.Issue("r2.3f2a9c0d41be", "hash", time.Now().Add(time.Minute))
	for in, want := range map[string]string{state: "r2.3f2a9c0d41be", "": "", "ce1.!!!.x": "", "other": ""} {
		if got := StateRequestID(in); got != want {
			t.Errorf("StateRequestID(%q) = %q, want %q", in, got, want)
		}
	}
}
