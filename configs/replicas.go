package configs

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// DefaultReplicaDrain is CODE_EXEC_DRAIN_TIMEOUT of a replica
// (CODE_EXEC_PEERS) that does not set it.
const DefaultReplicaDrain = 30 * time.Second

// replicaIDPattern is what a replica id may be: it is the first part of
// every id the replica issues, before a dot.
var replicaIDPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// ValidReplicaID reports whether id may name a replica.
func ValidReplicaID(id string) bool { return replicaIDPattern.MatchString(id) }

// PeerURLs parses CODE_EXEC_PEERS: each peer's id and base URL.
func (c *Config) PeerURLs() (map[string]*url.URL, error) {
	peers := map[string]*url.URL{}
	for _, p := range c.Peers {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		id, raw, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("CODE_EXEC_PEERS entry %q is not id=URL (such as b=http://10.0.0.2:8080)", p)
		}
		if !ValidReplicaID(id) {
			return nil, fmt.Errorf("CODE_EXEC_PEERS entry %q: the id %q is not a replica id (1 to 32 lower-case letters, digits and -)", p, id)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("CODE_EXEC_PEERS entry %q: %q is not the base URL of a replica (http or https, host and port, no path)", p, raw)
		}
		u.Path = ""
		if id == c.ReplicaID {
			return nil, fmt.Errorf("CODE_EXEC_PEERS lists this replica's own id %q: list only the others", id)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("CODE_EXEC_PEERS lists the replica %q twice", id)
		}
		peers[id] = u
	}
	return peers, nil
}

// ValidatePeers checks that replicas behind one address serve an HTTP
// transport. Call it once flags have set Transport.
func (c *Config) ValidatePeers() error {
	if c.Transport == TransportStdio && len(c.Peers) > 0 {
		return errors.New("CODE_EXEC_PEERS is set but the transport is stdio: replicas behind one address serve --transport http or sse")
	}
	return nil
}

// validateReplicas checks the settings of replicas behind one address.
func (c *Config) validateReplicas() []error {
	var errs []error
	if c.ReplicaID != "" && !ValidReplicaID(c.ReplicaID) {
		errs = append(errs, fmt.Errorf("CODE_EXEC_REPLICA_ID %q is not a replica id: use 1 to 32 lower-case letters, digits and -, starting and ending with a letter or digit", c.ReplicaID))
	}
	peers, err := c.PeerURLs()
	if err != nil {
		errs = append(errs, err)
	}
	if len(peers) > 0 {
		if c.ReplicaID == "" {
			errs = append(errs, errors.New("CODE_EXEC_PEERS is set but CODE_EXEC_REPLICA_ID is not: name this replica, so that the ids it issues say where to forward requests for them"))
		}
		if c.PeerToken == "" {
			errs = append(errs, errors.New("CODE_EXEC_PEERS is set but CODE_EXEC_PEER_TOKEN is not: replicas must authenticate each other; set the same random secret on all of them, for example from `openssl rand -hex 32`"))
		}
	}
	if c.PeerToken != "" && len(c.PeerToken) < 32 {
		errs = append(errs, fmt.Errorf("CODE_EXEC_PEER_TOKEN is too short (%d characters): use at least 32 random characters, for example from `openssl rand -hex 32`", len(c.PeerToken)))
	}
	if c.DrainTimeout < 0 || c.DrainTimeout > time.Hour {
		errs = append(errs, Invalid("DrainTimeout", c.DrainTimeout, "it is out of range"))
	}
	if c.ApprovalKey != "" && len(c.ApprovalKey) < 32 {
		errs = append(errs, fmt.Errorf("CODE_EXEC_APPROVAL_KEY is too short (%d characters): use at least 32 random characters, for example from `openssl rand -hex 32`", len(c.ApprovalKey)))
	}
	return errs
}
