package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/approvals/audit"
	"github.com/codeexec/codeexec/server/httpserve"
	"github.com/codeexec/codeexec/server/replicas"
)

// The approvals console: a static page whose script renders everything as
// text (never as HTML), served with a strict Content-Security-Policy.
var (
	//go:embed approval_console.html
	consoleHTML []byte
	//go:embed approval_console.js
	consoleJS []byte
	//go:embed approval_console.css
	consoleCSS []byte
)

// consoleScript is the console's script after the definitions of HIDDEN
// and HIDDEN_ON_ONE_LINE, the regular expressions of the characters it
// shows escaped: those of approvals.Hidden (and, for text on one line, tab
// and newline), so that the console, the CLI and the risk check agree.
var consoleScript = sync.OnceValue(func() []byte {
	var class strings.Builder
	for _, r := range approvals.HiddenRanges() {
		fmt.Fprintf(&class, `\u{%X}`, r[0])
		if r[1] != r[0] {
			fmt.Fprintf(&class, `-\u{%X}`, r[1])
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Written by codeexec: the characters of approvals.Hidden.\nconst HIDDEN = /[%s]/gu;\nconst HIDDEN_ON_ONE_LINE = /[\\t\\n%s]/gu;\n", class.String(), class.String())
	b.Write(consoleJS)
	return b.Bytes()
})

// AdminHeader must be sent (with any value) on every state-changing admin
// request. A browser cannot send a custom header cross-origin without a
// CORS preflight, which the admin listener never grants: this stops CSRF.
const AdminHeader = "X-Codeexec-Admin"

// Admin serves the approvals console (GET /) and its JSON API to list and
// answer pending requests, for people in a browser and for
// `codeexec approvals`:
//
//	GET  /api/pending[?since=V&wait=1]  the pending requests (long-poll while the version is V)
//	POST /api/requests/{id}/approve     body {"by": "name", "note": "..."} (optional)
//	POST /api/requests/{id}/deny
//	GET  /api/recent[?n=20]              the latest requests with their decisions and run outcomes (at most 100)
//
// Every API call needs "Authorization: Bearer <token>", whatever the
// address: code that runs on this host without network isolation can reach
// a loopback console too. The page itself (HTML, script, style) holds no
// data and is served to anyone; it asks for the token, or takes it from
// the URL's fragment (#token=...).
type Admin struct {
	gate    Gate
	history History
	token   string
	log     *slog.Logger
	// LongPoll bounds how long GET /api/pending?wait=1 waits (25s if 0).
	LongPoll time.Duration
	// AllowedOrigins are the web origins, besides the console's own, whose
	// requests it serves (CODE_EXEC_ALLOWED_ORIGINS); it answers no CORS,
	// so their scripts still cannot call the API. See httpserve.Protect.
	AllowedOrigins []string
	// Replicas, if not nil, are this replica and its peers: the pending
	// list holds every replica's requests (each peer asked over its peer
	// API, see Server.HTTPHandler), a peer that does not answer is said
	// in Replicas, and an answer goes to the replica whose id the request
	// carries.
	Replicas *replicas.Set
}

// History is what the record says of the latest requests (audit.Log),
// for GET /api/recent.
type History interface {
	Recent(n int) []audit.Activity
}

// NewAdmin returns the admin handler for gate, whose latest requests
// history keeps. token must not be empty: with an empty token every API
// call is refused.
func NewAdmin(gate Gate, history History, token string, log *slog.Logger) *Admin {
	if log == nil {
		log = slog.Default()
	}
	return &Admin{gate: gate, history: history, token: token, log: log}
}

// PendingList is the answer of GET /api/pending.
type PendingList struct {
	Version        uint64          `json:"version"`
	Policy         string          `json:"policy"`
	TimeoutSeconds float64         `json:"timeout_seconds"`
	Pending        []approvals.Ask `json:"pending"`
	Now            time.Time       `json:"now"`
	// Replicas says, with CODE_EXEC_PEERS, which replicas' requests the
	// list holds, and which could not be asked (Error).
	Replicas []ReplicaState `json:"replicas,omitempty"`
}

// ReplicaState is whether a replica's pending requests are in a list.
type ReplicaState struct {
	ID    string `json:"id"`
	Error string `json:"error,omitempty"`
}

// RecentList is the answer of GET /api/recent: what the audit record says
// about the latest requests, latest first.
type RecentList struct {
	Recent []audit.Activity `json:"recent"`
	Now    time.Time        `json:"now"`
}

// Answer is the body of POST /api/requests/{id}/approve and /deny.
type Answer struct {
	By   string `json:"by,omitempty"`
	Note string `json:"note,omitempty"`
	// Via is set by a replica that passes on an answer (the peer API).
	Via approvals.Via `json:"via,omitempty"`
}

// Handler returns the console and API, under the rule every listener
// shares for browsers (httpserve.Protect).
func (a *Admin) Handler() http.Handler {
	mux := http.NewServeMux()
	static := func(body []byte, ctype string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			_, _ = w.Write(body)
		}
	}
	mux.HandleFunc("GET /{$}", static(consoleHTML, "text/html; charset=utf-8"))
	mux.HandleFunc("GET /console.js", static(consoleScript(), "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /console.css", static(consoleCSS, "text/css; charset=utf-8"))
	mux.HandleFunc("GET /healthz", static([]byte("ok\n"), "text/plain; charset=utf-8"))
	mux.Handle("GET /api/pending", a.api(a.pending))
	mux.Handle("POST /api/requests/{id}/{action}", a.api(a.answer))
	mux.Handle("GET /api/recent", a.api(a.recent))
	return httpserve.Protect(secureHeaders(mux), httpserve.Policy{AllowedOrigins: a.AllowedOrigins, Log: a.log})
}

func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// api authenticates, checks that state-changing requests come from the
// console's own page or the CLI (Handler has checked the Origin), and
// writes JSON.
func (a *Admin) api(h func(r *http.Request) (int, any)) http.Handler {
	want := sha256.Sum256([]byte(a.token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if a.token == "" || !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="codeexec-admin"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "send Authorization: Bearer <token>: CODE_EXEC_ADMIN_TOKEN, or the token the server wrote to its token file at start (see its log)"})
			return
		}
		if r.Method != http.MethodGet {
			if r.Header.Get(AdminHeader) == "" {
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "missing the " + AdminHeader + " header"})
				return
			}
			if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-site request refused"})
				return
			}
		}
		code, body := h(r)
		writeJSON(w, code, body)
	})
}

// writeJSON answers v as JSON, hidden characters (client-controlled text
// can hold them) written as \u escapes: the same JSON, safe on a terminal.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(v)
	_, _ = w.Write(append(approvals.EscapeHiddenJSON(b), '\n'))
}

func (a *Admin) pending(r *http.Request) (int, any) {
	b := a.gate.Broker()
	since, err := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	wait := r.URL.Query().Get("wait") != "" && err == nil
	d := a.LongPoll
	if d <= 0 {
		d = 25 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), d)
	defer cancel()
	if len(a.Replicas.Peers()) == 0 {
		var (
			asks []approvals.Ask
			v    uint64
		)
		if wait {
			asks, v = b.Changes(ctx, since)
		} else {
			asks, v = b.Pending()
		}
		return http.StatusOK, a.pendingList(asks, v)
	}
	// With peers, the version is the sum of every replica's, and a
	// long poll asks the peers again each peerPoll, until it changes.
	for {
		list := a.everyReplica(ctx)
		if !wait || list.Version != since || ctx.Err() != nil {
			return http.StatusOK, list
		}
		_, local := b.Pending()
		pctx, pcancel := context.WithTimeout(ctx, peerPoll)
		b.Changes(pctx, local)
		pcancel()
	}
}

// peerPoll is how often a long poll of the pending list asks the peers.
const peerPoll = time.Second

func (a *Admin) pendingList(asks []approvals.Ask, v uint64) PendingList {
	return pendingOf(a.gate, asks, v)
}

// pendingOf is the PendingList of gate's requests asks at version v.
func pendingOf(gate Gate, asks []approvals.Ask, v uint64) PendingList {
	return PendingList{Version: v, Policy: string(gate.Policy()), TimeoutSeconds: gate.Timeout().Seconds(), Pending: asks, Now: time.Now().UTC()}
}

// everyReplica is the pending list of this replica and of every peer
// that answers; the others are said in Replicas.
func (a *Admin) everyReplica(ctx context.Context) PendingList {
	asks, v := a.gate.Broker().Pending()
	list := a.pendingList(asks, v)
	list.Replicas = []ReplicaState{{ID: a.Replicas.Self()}}
	for _, p := range a.Replicas.Peers() {
		var theirs PendingList
		st := ReplicaState{ID: p}
		if err := a.Replicas.Call(ctx, p, http.MethodGet, peerApprovalsPath, nil, &theirs); err != nil {
			st.Error = err.Error()
		} else {
			list.Version += theirs.Version
			list.Pending = append(list.Pending, theirs.Pending...)
		}
		list.Replicas = append(list.Replicas, st)
	}
	slices.SortFunc(list.Pending, func(x, y approvals.Ask) int { return x.Created.Compare(y.Created) })
	return list
}

func (a *Admin) recent(r *http.Request) (int, any) {
	n := 20
	if v, err := strconv.Atoi(r.URL.Query().Get("n")); err == nil && v > 0 {
		n = min(v, 100)
	}
	return http.StatusOK, RecentList{Recent: a.history.Recent(n), Now: time.Now().UTC()}
}

func (a *Admin) answer(r *http.Request) (int, any) {
	id := r.PathValue("id")
	var outcome approvals.Outcome
	switch r.PathValue("action") {
	case "approve":
		outcome = approvals.OutcomeApproved
	case "deny":
		outcome = approvals.OutcomeDenied
	default:
		return http.StatusNotFound, map[string]string{"error": "use approve or deny"}
	}
	var ans Answer
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 64<<10)).Decode(&ans); err != nil {
			return http.StatusBadRequest, map[string]string{"error": "the body must be JSON like {\"by\": \"name\", \"note\": \"why\"}"}
		}
	}
	via := approvals.ViaConsole
	if strings.EqualFold(r.Header.Get(AdminHeader), "cli") {
		via = approvals.ViaCLI
	}
	by := strings.TrimSpace(ans.By)
	if len(by) > 100 {
		by = by[:100]
	}
	if by == "" {
		by = "an operator"
	}
	by += " (" + string(via) + " from " + r.RemoteAddr + ")"
	if peer := replicas.Owner(id); peer != "" && slices.Contains(a.Replicas.Peers(), peer) {
		return a.answerOnPeer(r.Context(), peer, id, r.PathValue("action"), Answer{By: by, Note: truncate(ans.Note, 500), Via: via})
	}
	return decide(a.gate, a.log, approvals.Decision{ID: id, Outcome: outcome, By: by, Via: via, Note: truncate(ans.Note, 500)})
}

// answerOnPeer passes an answer on to the replica whose request it is.
func (a *Admin) answerOnPeer(ctx context.Context, peer, id, action string, ans Answer) (int, any) {
	body, _ := json.Marshal(ans)
	var out map[string]any
	err := a.Replicas.Call(ctx, peer, http.MethodPost, peerApprovalsPath+"/"+url.PathEscape(id)+"/"+action, bytes.NewReader(body), &out)
	var pe *replicas.PeerError
	switch {
	case errors.Is(err, replicas.ErrPeerDown):
		return http.StatusNotFound, map[string]string{"error": replicas.Ended("approval request "+id, peer)}
	case errors.As(err, &pe):
		if pe.Body == nil {
			return pe.Status, map[string]string{"error": pe.Error()}
		}
		return pe.Status, pe.Body
	case err != nil:
		return http.StatusBadGateway, map[string]string{"error": err.Error()}
	}
	a.log.Info("approval answered on its replica", "id", id, "replica", peer, "by", ans.By)
	return http.StatusOK, out
}

// decide answers a request of gate's Broker, as the API says it.
func decide(gate Gate, log *slog.Logger, d approvals.Decision) (int, any) {
	id, outcome, by := d.ID, d.Outcome, d.By
	d, err := gate.Broker().Decide(d)
	switch {
	case errors.Is(err, approvals.ErrUnknownRequest):
		return http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no pending request %q (it was answered, withdrawn or timed out)", id)}
	case errors.Is(err, approvals.ErrAlreadyDecided):
		return http.StatusConflict, map[string]any{"error": "already decided: the first answer stands", "decision": d}
	case err != nil:
		return http.StatusInternalServerError, map[string]string{"error": err.Error()}
	}
	log.Info("approval answered", "id", id, "outcome", outcome, "by", by)
	return http.StatusOK, map[string]any{"decision": d}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Serve serves the console on ln until ctx ends.
func (a *Admin) Serve(ctx context.Context, ln net.Listener) error {
	return httpserve.Serve(ctx, ln, a.Handler(), 3*time.Second, nil)
}

// peerApprovalsPath is where a replica's peers list and answer its
// approval requests (on its MCP listener, with the peer token):
//
//	GET  /peer/approvals                  the pending list (PendingList)
//	POST /peer/approvals/{id}/{action}    an Answer with By and Via set
const peerApprovalsPath = "/peer/approvals"

// peerAPI serves the peers' calls for the approvals of gate.
func peerAPI(set *replicas.Set, gate Gate, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+peerApprovalsPath, func(w http.ResponseWriter, r *http.Request) {
		asks, v := gate.Broker().Pending()
		writeJSON(w, http.StatusOK, pendingOf(gate, asks, v))
	})
	mux.HandleFunc("POST "+peerApprovalsPath+"/{id}/{action}", func(w http.ResponseWriter, r *http.Request) {
		var ans Answer
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&ans); err != nil || ans.By == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the body must be an Answer with by and via"})
			return
		}
		outcome := map[string]approvals.Outcome{"approve": approvals.OutcomeApproved, "deny": approvals.OutcomeDenied}[r.PathValue("action")]
		if outcome == "" {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "use approve or deny"})
			return
		}
		code, body := decide(gate, log, approvals.Decision{ID: r.PathValue("id"), Outcome: outcome, By: ans.By, Via: ans.Via, Note: truncate(ans.Note, 500)})
		writeJSON(w, code, body)
	})
	return set.RequirePeer(mux)
}
