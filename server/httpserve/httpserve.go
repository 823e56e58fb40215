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
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
			http.Error(w, "401 unauthorized: send Authorization: Bearer <"+setting+">", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
