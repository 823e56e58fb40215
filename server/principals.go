package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/server/httpserve"
	"github.com/codeexec/codeexec/server/principals"
)

// Who calls: every request is some principal's (Options.Principals). Over
// HTTP the principal comes from the request's bearer token; over stdio it
// is the registry's one principal. It travels in the request's context
// (principals.WithPrincipal) to the tools, the runner chain, the audit
// record and the metrics.
//
// The MCP session ids of the HTTP transports are bound to the principal
// that opened the session: an id is made of 128 random bits and an HMAC
// of them and the principal's name, under a key of this server's. A
// request that names a session (the Mcp-Session-Id header of streamable
// HTTP, the sessionId of SSE's message endpoint) whose id was not made for
// its principal gets exactly the answer of an id that does not exist, so
// that no principal can read, use or end another's MCP session, or the
// tasks, sessions and artifacts that belong to it.

// principal is the principal of the request of ctx. Every transport puts
// one in its requests' contexts; a context without one is the registry's
// principal of clients without a token where there is one (stdio, HTTP
// without tokens), and otherwise nobody's: principals.Nobody, who may do
// nothing.
func (s *Server) principal(ctx context.Context) *principals.Principal {
	if p := principals.From(ctx); p != nil {
		return p
	}
	if p, ok := s.principals.Authenticate("", false); ok {
		return p
	}
	return principals.Nobody
}

// authenticate is the HTTP transports' authentication: a request whose
// bearer token is no principal's gets 401; the others go on with their
// principal in their context.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return httpserve.Authenticate(next, "codeexec", s.principals.Credential(), func(r *http.Request, token string, present bool) (*http.Request, bool) {
		p, ok := s.principals.Authenticate(token, present)
		if !ok {
			return r, false
		}
		return r.WithContext(principals.WithPrincipal(r.Context(), p)), true
	})
}

// sessionIDs makes and checks MCP session ids bound to principals.
type sessionIDs struct {
	key [32]byte
	// prefix starts every id: the replica's id and a dot, or nothing.
	prefix string
}

// sessionIDPrefix starts every MCP session id, as mcp-go's own do.
const sessionIDPrefix = "mcp-session-"

func newSessionIDs(prefix string) *sessionIDs {
	b := &sessionIDs{prefix: prefix}
	_, _ = rand.Read(b.key[:])
	return b
}

// mac is the id's tag: the HMAC of the principal's name and the random
// part.
func (b *sessionIDs) mac(principal, random string) string {
	m := hmac.New(sha256.New, b.key[:])
	m.Write([]byte(principal))
	m.Write([]byte{0})
	m.Write([]byte(random))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// generate makes a new session id for principal.
func (b *sessionIDs) generate(principal string) string {
	r := make([]byte, 16)
	_, _ = rand.Read(r)
	random := hex.EncodeToString(r)
	return b.prefix + sessionIDPrefix + random + "-" + b.mac(principal, random)
}

// valid reports whether id was made for principal by this server.
func (b *sessionIDs) valid(principal, id string) bool {
	rest, ok := strings.CutPrefix(id, b.prefix+sessionIDPrefix)
	if !ok {
		return false
	}
	random, tag, ok := strings.Cut(rest, "-")
	if !ok || len(random) != 32 || len(tag) != 32 {
		return false
	}
	return hmac.Equal([]byte(tag), []byte(b.mac(principal, random)))
}

// ResolveSessionIdManager gives mcp-go's streamable HTTP transport the
// session ids of the request's principal (r is nil when mcp-go ends
// sessions by itself; it then only terminates, which checks nothing).
func (b *sessionIDs) ResolveSessionIdManager(r *http.Request) mcpserver.SessionIdManager {
	name := ""
	if r != nil {
		if p := principals.From(r.Context()); p != nil {
			name = p.Name
		}
	}
	return boundIDs{b, name}
}

// boundIDs are the session ids of one principal (mcpserver.SessionIdManager).
type boundIDs struct {
	b         *sessionIDs
	principal string
}

func (m boundIDs) Generate() string { return m.b.generate(m.principal) }

func (m boundIDs) Validate(id string) (bool, error) {
	if !m.b.valid(m.principal, id) {
		return false, errUnknownSessionID
	}
	return false, nil
}

func (m boundIDs) Terminate(id string) (bool, error) { return false, nil }

// errUnknownSessionID is a session id that is not the request's
// principal's (or not this server's at all).
var errUnknownSessionID = errors.New("unknown session id")

// bindStreamableSessions answers a streamable HTTP request that names an
// MCP session (Mcp-Session-Id) not made for its principal as mcp-go
// answers an unknown one: 404 "Invalid session ID". mcp-go itself checks
// the ids of POST requests (through boundIDs), but neither those of GET,
// which opens a session's stream, nor those of DELETE, which ends it.
func (s *Server) bindStreamableSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(mcpserver.HeaderKeySessionID); id != "" && !s.sessionIDs.valid(s.principal(r.Context()).Name, id) {
			http.Error(w, "Invalid session ID", http.StatusNotFound)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bindSSESessions sends an SSE message whose sessionId was not made for
// its principal on to mcp-go with the id of a session that does not
// exist, so that it answers exactly as for any unknown session.
func (s *Server) bindSSESessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if id := q.Get("sessionId"); id != "" && !s.sessionIDs.valid(s.principal(r.Context()).Name, id) {
			q.Set("sessionId", s.sessionIDs.generate("\x00unknown"))
			r = r.Clone(r.Context())
			r.URL.RawQuery = q.Encode()
		}
		next.ServeHTTP(w, r)
	})
}

// sseSessionID makes the id of a new SSE session, for the principal of the
// request that opens it.
func (s *Server) sseSessionID(ctx context.Context, r *http.Request) (string, error) {
	return s.sessionIDs.generate(s.principal(r.Context()).Name), nil
}
