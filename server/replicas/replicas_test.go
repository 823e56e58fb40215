package replicas_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/server/replicas"
)

const token = "0123456789abcdef0123456789abcdef"

// routeBySession routes on a header, as the server routes on Mcp-Session-Id.
func routeBySession(r *http.Request) replicas.Route {
	return replicas.Route{Replica: replicas.Owner(r.Header.Get("Session")), What: "session", NotFound: true, ID: json.RawMessage(`7`)}
}

func TestForward(t *testing.T) {
	t.Parallel()
	// b is a real peer: a replica's Forward around a handler that says who served.
	var b *replicas.Set
	bSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.Forward(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "b served "+r.Header.Get("Authorization"))
		}), routeBySession).ServeHTTP(w, r)
	}))
	defer bSrv.Close()
	bURL, _ := url.Parse(bSrv.URL)
	b = replicas.New("b", map[string]*url.URL{"a": {Scheme: "http", Host: "127.0.0.1:1"}}, token, nil)
	// c's address refuses connections: a replica that stopped.
	cURL := &url.URL{Scheme: "http", Host: sandboxtest.RefusingAddr(t)}
	a := replicas.New("a", map[string]*url.URL{"b": bURL, "c": cURL}, token, nil)
	h := a.Forward(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "a served")
	}), routeBySession)

	for _, tc := range []struct {
		name, session, peerToken string
		code                     int
		body                     string
	}{
		{"own id", "a.x", "", 200, "a served"},
		{"no id", "", "", 200, "a served"},
		{"unknown replica", "zz.x", "", 200, "a served"},
		{"peer's id, forwarded with the client's credentials", "b.x", "", 200, "b served Bearer client"},
		{"from a peer: never forwarded again", "b.x", token, 200, "a served"},
		{"a wrong peer token is refused", "b.x", "not-the-token-not-the-token-0000", 403, "is not this replica's CODE_EXEC_PEER_TOKEN"},
		{"a stopped peer's id", "c.x", "", 404, `"message":"the session ended because its server (replica c) stopped"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader("{}"))
			r.Header.Set("Session", tc.session)
			r.Header.Set("Authorization", "Bearer client")
			if tc.peerToken != "" {
				r.Header.Set(replicas.PeerHeader, tc.peerToken)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("%d %q, want %d and %q", w.Code, w.Body.String(), tc.code, tc.body)
			}
		})
	}
}

func TestOwner(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{"r1.ses_ab": "r1", "mcp-session-x": "", ".x": "", "b.a.c": "b"} {
		if got := replicas.Owner(id); got != want {
			t.Errorf("Owner(%q) = %q, want %q", id, got, want)
		}
	}
	var single *replicas.Set
	if single.Prefix() != "" || single.Self() != "" || single.Peers() != nil {
		t.Error("a nil Set (a single server) must issue ids without a replica and know no peer")
	}
}
