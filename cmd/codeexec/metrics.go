package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/server/httpserve"
	"github.com/codeexec/codeexec/server/metrics"
)

// startMetrics serves the metrics and probes on CODE_EXEC_METRICS_ADDR,
// until ctx ends; without an address it returns nil (a nil *Metrics
// records nothing).
func startMetrics(ctx context.Context, cfg *configs.Config, log *slog.Logger) (*metrics.Metrics, error) {
	if cfg.MetricsAddr == "" {
		return nil, nil
	}
	m := metrics.New(metrics.Info{Version: buildVersion(), Mode: cfg.Sandbox})
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("cannot serve metrics on CODE_EXEC_METRICS_ADDR=%s: %w (choose another address, or leave it empty)", cfg.MetricsAddr, err)
	}
	go func() {
		if err := m.Serve(ctx, ln, cfg.MetricsToken, httpserve.Policy{AllowedOrigins: cfg.AllowedOrigins, Log: log}); err != nil {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics", "token", cfg.MetricsToken != "")
	return m, nil
}

// watchReadiness makes /readyz answer 200 once the sandbox is ready: the
// runner started (docker mode probed its image), and the warm pool of
// docker or kubernetes mode, if any (pool is nil in other modes), has held a
// container or pod of every language once. It stays ready after that,
// whatever the load, until ctx ends.
func watchReadiness(ctx context.Context, m *metrics.Metrics, pool func() metrics.PoolStats) {
	if m == nil {
		return
	}
	if pool != nil {
		m.SetPool(pool)
	}
	var warm atomic.Bool
	m.SetReady(func(context.Context) error {
		if ctx.Err() != nil {
			return errors.New("shutting down")
		}
		if pool == nil || warm.Load() {
			return nil
		}
		for lang, n := range pool().Ready {
			if n == 0 {
				return fmt.Errorf("the warm pool has no %s container or pod yet", lang)
			}
		}
		warm.Store(true)
		return nil
	})
}
