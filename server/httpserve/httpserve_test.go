package httpserve

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRequireBearer: only "Authorization: Bearer <token>" with the exact
// token gets through; a bare token, another scheme, a prefix or more of
// the token get 401, which names what to send.
func TestRequireBearer(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef-token"
	h := RequireBearer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }), token, "test", "TEST_TOKEN")
	for header, want := range map[string]int{
		"":                        http.StatusUnauthorized,
		token:                     http.StatusUnauthorized,
		"Basic " + token:          http.StatusUnauthorized,
		"Bearer " + token[:5]:     http.StatusUnauthorized,
		"Bearer " + token + "x":   http.StatusUnauthorized,
		"Bearer ":                 http.StatusUnauthorized,
		"Bearer " + token:         http.StatusTeapot,
		"Bearer  " + token + "  ": http.StatusTeapot,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Authorization %q: %d, want %d", header, rec.Code, want)
		}
		if want == http.StatusUnauthorized && (rec.Header().Get("WWW-Authenticate") != `Bearer realm="test"` || rec.Body.String() != "401 unauthorized: send Authorization: Bearer <TEST_TOKEN>\n") {
			t.Errorf("Authorization %q: the 401 says %q, %q", header, rec.Header().Get("WWW-Authenticate"), rec.Body.String())
		}
	}
}
