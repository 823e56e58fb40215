// Package httpserve holds what codeexec's HTTP listeners share (the MCP
// transports, the approvals console, the metrics endpoint): a serve loop that
// shuts down gracefully when its context ends, bearer-token authentication
// compared in constant time, and the rule for browsers (Protect: Host,
// Origin, CORS; RequireJSON: the MCP transports' bodies).
package httpserve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
	"time"
)

// Serve serves handler on ln until ctx ends, then shuts down gracefully
// within grace (after beforeShutdown, if set), closing whatever is still
// open after that. It closes ln, and returns the server's error if it stops
// by itself before ctx ends.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, grace time.Duration, beforeShutdown func(context.Context) error) error {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(ln) }()
	select {
	case err := <-errCh:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if beforeShutdown != nil {
		_ = beforeShutdown(sctx)
	}
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}

// RequireBearer rejects requests without "Authorization: Bearer <token>"
// with 401, naming setting (the variable that holds the token) and realm in
// the answer. The comparison is constant-time, over SHA-256 digests so that
// the token's length does not leak either. An empty token disables the check.
func RequireBearer(next http.Handler, token, realm, setting string) http.Handler {
	if token == "" {
		return next
	}
	want := sha256.Sum256([]byte(token))
	return Authenticate(next, realm, setting, func(r *http.Request, got string, present bool) (*http.Request, bool) {
		sum := sha256.Sum256([]byte(got))
		return r, subtle.ConstantTimeCompare(sum[:], want[:]) == 1 && present
	})
}

// Authenticate passes to next the requests that check accepts, given the
// bearer token each sent ("Authorization: Bearer <token>"; present says
// whether it sent one: without it, token is ""), as the request check
// returns (with what it learned of the caller in its context); it answers
// the others 401, naming what to send (credential) and realm.
func Authenticate(next http.Handler, realm, credential string, check func(r *http.Request, token string, present bool) (*http.Request, bool)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, present := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !present {
			got = ""
		}
		r, ok := check(r, strings.TrimSpace(got), present)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
			http.Error(w, "401 unauthorized: send Authorization: Bearer <"+credential+">", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
