package artifacts

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

// sniffBinary must agree with net/http's DetectContentType wherever that
// finds a type that is not text: on every signature (whole, cut short, with
// a byte changed, followed by junk) and on random bytes.
func TestSniffMatchesNetHTTP(t *testing.T) {
	want := func(data []byte) string {
		ct := http.DetectContentType(data)
		if ct == "application/octet-stream" || strings.HasPrefix(ct, "text/") {
			return ""
		}
		return ct
	}
	check := func(data []byte) {
		t.Helper()
		if got, w := sniffBinary(data), want(data); got != w {
			t.Errorf("%q: sniffBinary %q, net/http %q", data, got, w)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	junk := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	mp4 := []byte("\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00isommp42")
	samples := [][]byte{mp4, mp4[:11], []byte("\x00\x00\x00\x18ftypisom\x00\x00\x00\x00isomavc1"), []byte("<html><body>\x00\x89PNG"), []byte("\xEF\xBB\xBF\x00%PDF-"), []byte(" %PDF-1.7")}
	for _, s := range binarySignatures {
		pat := append([]byte(nil), s.pat...)
		for i := range pat {
			if s.mask != nil && s.mask[i] == 0 {
				pat[i] = byte(rng.IntN(256))
			}
		}
		samples = append(samples, pat, append(append([]byte(nil), pat...), junk(600)...), pat[:len(pat)-1])
		changed := append([]byte(nil), pat...)
		changed[len(changed)-1] ^= 0x01
		samples = append(samples, changed)
	}
	for range 2000 {
		samples = append(samples, junk(rng.IntN(64)))
	}
	for _, s := range samples {
		check(s)
	}
}
