package metrics

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/codeexec/codeexec/server/httpserve"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves:
//
//	GET /metrics  the metrics in the Prometheus text format (needs the token, if one is set)
//	GET /healthz  200 while the process serves
//	GET /readyz   200 once the sandbox is ready (image probed, pool warm), 503 before and whenever the check fails
//
// token, if not empty, is the bearer token /metrics requires
// ("Authorization: Bearer <token>", compared in constant time). The probes
// say nothing but ready or not and need no token, so that orchestrators can
// call them. Every path is under the rule all codeexec listeners share for
// browsers, httpserve.Protect with browsers (its CORS is ignored: the
// listener answers none).
func (m *Metrics) Handler(token string, browsers httpserve.Policy) http.Handler {
	mux := http.NewServeMux()
	metrics := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	mux.Handle("GET /metrics", httpserve.RequireBearer(metrics, token, "codeexec-metrics", "CODE_EXEC_METRICS_TOKEN"))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := m.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	browsers.CORS = nil
	return httpserve.Protect(mux, browsers)
}

// Serve serves Handler(token, browsers) on ln until ctx ends, then shuts
// down within a few seconds. It closes ln.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener, token string, browsers httpserve.Policy) error {
	return httpserve.Serve(ctx, ln, m.Handler(token, browsers), 3*time.Second, nil)
}
