package main

import (
	"context"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/sandbox/kube"
	"github.com/codeexec/codeexec/server/metrics"
)

// newKubernetes starts kubernetes mode (CODE_EXEC_SANDBOX=kubernetes).
// client-go's own messages (klog) go to the server's log.
func newKubernetes(ctx context.Context, cfg *configs.Config, log *slog.Logger) (*kube.Runner, error) {
	klog.SetLogger(logr.FromSlogHandler(log.With("component", "client-go").Handler()))
	return kube.New(ctx, kube.Config{
		Namespace:         cfg.K8sNamespace,
		Image:             cfg.KubernetesImage(),
		RuntimeClass:      cfg.K8sRuntimeClass,
		UserNamespaces:    cfg.K8sUserNamespaces,
		Languages:         cfg.Languages,
		Logger:            log,
		PoolSize:          cfg.K8sPoolSize,
		PoolLimits:        cfg.Limits(cfg.Timeout),
		NetworkCheck:      kube.NetworkCheck(cfg.K8sNetworkCheck),
		NetworkCheckAddrs: cfg.K8sNetworkCheckAddrs,
	})
}

// kubePool is kubernetes mode's warm pool for the metrics, when runner is
// kubernetes mode's.
func kubePool(runner any) (func() metrics.PoolStats, bool) {
	k, ok := runner.(*kube.Runner)
	if !ok {
		return nil, false
	}
	return func() metrics.PoolStats {
		st := k.PoolStats()
		return metrics.PoolStats{Ready: st.Ready, Hits: st.Hits, Misses: st.Misses}
	}, true
}
