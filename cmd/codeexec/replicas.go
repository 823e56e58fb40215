package main

import (
	"log/slog"

	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/server/replicas"
)

// idPrefix starts every id this replica issues: its id and a dot, or
// nothing without CODE_EXEC_REPLICA_ID.
func idPrefix(cfg *configs.Config) string {
	if cfg.ReplicaID == "" {
		return ""
	}
	return cfg.ReplicaID + "."
}

// newReplicas is this replica and its peers (CODE_EXEC_REPLICA_ID,
// CODE_EXEC_PEERS, CODE_EXEC_PEER_TOKEN), or nil for a single server.
// The settings were validated by configs.Load.
func newReplicas(cfg *configs.Config, log *slog.Logger) *replicas.Set {
	peers, _ := cfg.PeerURLs()
	s := replicas.New(cfg.ReplicaID, peers, cfg.PeerToken, log)
	if s != nil {
		log.Info("replica", "id", s.Self(), "peers", s.Peers())
	}
	return s
}
