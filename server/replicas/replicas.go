// Package replicas lets several codeexec servers stand behind one address
// (CODE_EXEC_REPLICA_ID, CODE_EXEC_PEERS, CODE_EXEC_PEER_TOKEN). Every id a
// replica issues starts with its own id and a dot ("a.mcp-session-…",
// "a.ses_…"); a request that names an id of another replica is forwarded
// to that replica over HTTP, streams included, with the client's own
// Authorization header, so that the owner sees the same principal. A
// forwarded request carries the peer token (PeerHeader), which the owner
// checks in constant time and which keeps it from being forwarded again.
//
// An owner that cannot be reached is answered at once: the request's id
// belongs to a server that stopped (Ended).
package replicas

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"time"
)

// PeerHeader carries the peer token on every request one replica makes
// of another.
const PeerHeader = "X-Codeexec-Peer-Token"

// ConnectTimeout bounds how long a replica tries to reach another.
const ConnectTimeout = 3 * time.Second

// Set is this replica and its peers. A nil *Set is a single server: it
// forwards nothing and issues ids without a replica.
type Set struct {
	self   string
	peers  map[string]*url.URL
	token  [sha256.Size]byte
	raw    string
	client *http.Client
	tr     *http.Transport
	log    *slog.Logger
}

// New returns the replica self with peers (id → base URL), which
// authenticate each other with token. It returns nil when self is empty
// (a single server).
func New(self string, peers map[string]*url.URL, token string, log *slog.Logger) *Set {
	if self == "" {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	tr := &http.Transport{
		Proxy:               nil, // peers are reached directly
		DialContext:         (&net.Dialer{Timeout: ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: ConnectTimeout,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Set{self: self, peers: maps.Clone(peers), token: sha256.Sum256([]byte(token)), raw: token,
		tr: tr, client: &http.Client{Transport: tr}, log: log}
}

// Self is this replica's id ("" for a nil Set).
func (s *Set) Self() string {
	if s == nil {
		return ""
	}
	return s.self
}

// Peers are the other replicas' ids, sorted.
func (s *Set) Peers() []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.peers))
}

// Prefix starts every id this replica issues: its id and a dot ("" for
// a nil Set, a single server).
func (s *Set) Prefix() string {
	if s == nil {
		return ""
	}
	return s.self + "."
}

// Owner is the replica an id names (the part before its first dot), or ""
// for an id that names none.
func Owner(id string) string {
	r, _, ok := strings.Cut(id, ".")
	if !ok || r == "" || len(r) > 32 {
		return ""
	}
	return r
}

// FromPeer reports whether r carries a peer token, and whether it is the
// right one (compared in constant time).
func (s *Set) FromPeer(r *http.Request) (present, ok bool) {
	got := r.Header.Get(PeerHeader)
	if got == "" || s == nil {
		return got != "", false
	}
	sum := sha256.Sum256([]byte(got))
	return true, subtle.ConstantTimeCompare(sum[:], s.token[:]) == 1
}

// Ended is the sentence for an id of a replica that cannot be reached:
// what (a session, a task ...) ended because its server stopped.
func Ended(what, replica string) string {
	return fmt.Sprintf("the %s ended because its server (replica %s) stopped", what, replica)
}

// ErrPeerDown: a peer did not answer.
var ErrPeerDown = errors.New("replica unreachable")

// Route says where a request goes: the replica that owns the id it names
// (Replica, "" to serve it here), what kind of id that is (for Ended), and
// whether a missing owner answers 404 (an MCP session that is gone) or a
// JSON-RPC error in a 200 (a task or a session of codeexec); ID is the
// JSON-RPC id of the request, for that answer.
type Route struct {
	Replica  string
	What     string
	NotFound bool
	ID       json.RawMessage
	// Names is the id the request names ("" for none: it starts
	// something new).
	Names string
}

// Forward returns a handler that sends to their owner the requests that
// route says belong to a peer, and serves the others with next. A request
// from a peer (with the right PeerHeader) is always served here; one with
// a wrong peer token is refused with 403.
func (s *Set) Forward(next http.Handler, route func(*http.Request) Route) http.Handler {
	if s == nil {
		return next
	}
	proxies := map[string]*httputil.ReverseProxy{}
	for id, u := range s.peers {
		proxies[id] = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(u)
				pr.SetXForwarded()
				pr.Out.Header.Set(PeerHeader, s.raw)
			},
			Transport:     s.tr,
			FlushInterval: -1, // SSE streams go through as they come
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				rt, _ := r.Context().Value(routeKey{}).(Route)
				if r.Context().Err() != nil {
					return // the client went away
				}
				s.log.Warn("replica unreachable", "replica", id, "err", err)
				WriteEnded(w, rt)
			},
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if present, ok := s.FromPeer(r); present {
			if !ok {
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "refused: the peer token of " + PeerHeader + " is not this replica's CODE_EXEC_PEER_TOKEN"})
				return
			}
			r.Header.Del(PeerHeader)
			next.ServeHTTP(w, r)
			return
		}
		rt := route(r)
		p, ok := proxies[rt.Replica]
		if rt.Replica == "" || rt.Replica == s.self || !ok {
			next.ServeHTTP(w, r)
			return
		}
		s.log.Debug("forwarding to the owner", "replica", rt.Replica, "what", rt.What, "method", r.Method, "path", r.URL.Path)
		p.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, rt)))
	})
}

type routeKey struct{}

// WriteEnded answers a request whose owner rt.Replica cannot be reached:
// 404 for an MCP session (clients then start anew), a JSON-RPC error
// otherwise, both saying that the id ended with its server.
func WriteEnded(w http.ResponseWriter, rt Route) {
	code := http.StatusOK
	if rt.NotFound {
		code = http.StatusNotFound
	}
	WriteRPCError(w, code, rt.ID, -32602, Ended(rt.What, rt.Replica))
}

// WriteRPCError answers with HTTP status and a JSON-RPC error of code and
// message for the request of id (null if empty).
func WriteRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int, message string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	writeJSON(w, status, map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": message}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Call sends a request to peer at path with the peer token, and decodes a
// 2xx answer's JSON into out. A peer that cannot be reached is ErrPeerDown.
func (s *Set) Call(ctx context.Context, peer, method, path string, body io.Reader, out any) error {
	u, ok := s.peers[peer]
	if !ok {
		return fmt.Errorf("no replica %q among CODE_EXEC_PEERS", peer)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String()+path, body)
	if err != nil {
		return err
	}
	req.Header.Set(PeerHeader, s.raw)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: replica %s: %v", ErrPeerDown, peer, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) != nil {
			b = nil
		}
		if e.Error == "" {
			e.Error = resp.Status
		}
		return &PeerError{Peer: peer, Status: resp.StatusCode, Msg: e.Error, Body: json.RawMessage(b)}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// PeerError is a peer's answer other than 2xx: its status, the error it
// said, and its whole JSON body (nil if it was not JSON).
type PeerError struct {
	Peer   string
	Status int
	Msg    string
	Body   json.RawMessage
}

func (e *PeerError) Error() string { return "replica " + e.Peer + ": " + e.Msg }

// RequirePeer serves only requests that carry the right peer token; the
// others get 403.
func (s *Set) RequirePeer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.FromPeer(r); !ok {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "refused: only another replica, with CODE_EXEC_PEER_TOKEN in " + PeerHeader + ", may call this"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
