package main

import (
	"context"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/kube"
	"github.com/codeexec/codeexec/server/metrics"
)

// newKubernetes starts kubernetes mode (CODE_EXEC_SANDBOX=kubernetes), with
// its sessions (a pod each) and its warm pool's statistics; egressProxy
// (nil without CODE_EXEC_NETWORK=allowlist) serves the runs' network.
// client-go's own messages (klog) go to the server's log.
func newKubernetes(ctx context.Context, cfg *configs.Config, log *slog.Logger, egressProxy *proxy.Proxy) (mode, error) {
	klog.SetLogger(logr.FromSlogHandler(log.With("component", "client-go").Handler()))
	r, err := kube.New(ctx, kube.Config{
		Namespace:         cfg.K8sNamespace,
		Image:             kubernetesImage(cfg),
		RuntimeClass:      cfg.K8sRuntimeClass,
		UserNamespaces:    cfg.K8sUserNamespaces,
		Languages:         cfg.Languages,
		Logger:            log,
		PoolSize:          cfg.K8sPoolSize,
		PoolLimits:        runLimits(cfg, cfg.Timeout),
		NetworkCheck:      kube.NetworkCheck(cfg.K8sNetworkCheck),
		NetworkCheckAddrs: cfg.K8sNetworkCheckAddrs,
		Egress:            egressProxy,
	})
	if err != nil {
		return mode{}, err
	}
	pool := func() metrics.PoolStats {
		st := r.PoolStats()
		return metrics.PoolStats{Ready: st.Ready, Hits: st.Hits, Misses: st.Misses}
	}
	return mode{runner: r, sessions: r.Sessions(), pool: pool}, nil
}

// kubernetesImage is the sandbox image of kubernetes mode:
// CODE_EXEC_K8S_IMAGE, or CODE_EXEC_DOCKER_IMAGE's value.
func kubernetesImage(cfg *configs.Config) string {
	if cfg.K8sImage != "" {
		return cfg.K8sImage
	}
	return cfg.DockerImage
}
