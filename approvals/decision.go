package approvals

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// Outcome is how an approval request ended.
type Outcome string

// The outcomes. Only OutcomeApproved and OutcomeNotRequired let code run.
const (
	OutcomeApproved    Outcome = "approved"
	OutcomeNotRequired Outcome = "not_required"
	OutcomeDenied      Outcome = "denied"
	// OutcomeCancelled: the approver closed the question without answering.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeTimedOut: nobody answered within the approval timeout.
	OutcomeTimedOut Outcome = "timed_out"
	// OutcomeWithdrawn: the client went away or gave up while waiting.
	OutcomeWithdrawn Outcome = "withdrawn"
	// OutcomeExpired: an approval came back after its state expired.
	OutcomeExpired Outcome = "expired"
	// OutcomeReplayed: an approval's single-use state was used again.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeForged: an approval's state was not issued by this server, or
	// was issued for other code.
	OutcomeForged Outcome = "forged"
	// OutcomeUnavailable: approval is required but no way to ask a person
	// is available.
	OutcomeUnavailable Outcome = "unavailable"
)

// Allows reports whether code may run.
func (o Outcome) Allows() bool { return o == OutcomeApproved || o == OutcomeNotRequired }

// Via is how a decision was made.
type Via string

// The ways a decision is made.
const (
	ViaPolicy      Via = "policy"
	ViaElicitation Via = "elicitation"
	ViaConsole     Via = "console"
	ViaCLI         Via = "cli"
	ViaTimeout     Via = "timeout"
	ViaClient      Via = "client"
	ViaServer      Via = "server"
)

// Requester says who asked for a run.
type Requester struct {
	// Principal and Org name the caller the server authenticated (its
	// principal, see server/principals) and its organisation.
	Principal string `json:"principal,omitempty"`
	Org       string `json:"org,omitempty"`
	// Client is the MCP client's name and version, as it announced them.
	Client string `json:"client,omitempty"`
	// Session is the MCP session id, if any.
	Session string `json:"session,omitempty"`
	// Transport is stdio, sse or http.
	Transport string `json:"transport,omitempty"`
	// Remote is the peer address over HTTP transports.
	Remote string `json:"remote,omitempty"`
}

// String is a short description for people: "principal analytics-agent
// of acme, through Claude Code 1.0 over http from 10.0.0.7:51234 (session
// mcp-session-…)".
func (r Requester) String() string {
	s := r.Client
	if s == "" {
		s = "an unnamed MCP client"
	}
	if r.Principal != "" {
		who := "principal " + r.Principal
		if r.Org != "" {
			who += " of " + r.Org
		}
		s = who + ", through " + s
	}
	if r.Transport != "" {
		s += " over " + r.Transport
	}
	if r.Remote != "" {
		s += " from " + r.Remote
	}
	if r.Session != "" {
		s += " (session " + shortID(r.Session) + ")"
	}
	return s
}

func shortID(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// Ask is what an approver is shown: one run waiting for a decision.
type Ask struct {
	ID         string `json:"id"`
	Language   string `json:"language"`
	Code       string `json:"code"`
	StdinBytes int    `json:"stdin_bytes"`
	// Stdin is the program's standard input, which it may evaluate (part
	// of CodeSHA256).
	Stdin      string    `json:"stdin,omitempty"`
	TimeoutMS  int64     `json:"timeout_ms"`
	CodeSHA256 string    `json:"code_sha256"`
	Reasons    []string  `json:"reasons"`
	Requester  Requester `json:"requester"`
	// Session names the session the code would run in ("" for a run of
	// its own), where the earlier calls' state may matter.
	Session  string    `json:"session,omitempty"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline"`
	// Files are the files the request writes into the run's working
	// directory (their contents are part of CodeSHA256).
	Files []AskFile `json:"files,omitempty"`
	// Workspace says what the run can see of the operator's project folder
	// ("" when there is none), so that the person approving knows.
	Workspace string `json:"workspace,omitempty"`
	// Packages are the packages installed for the run (code_execute's
	// packages argument, or the session's), which the person approving
	// allows too: their code runs with the program's (part of CodeSHA256).
	Packages []string `json:"packages,omitempty"`
	// Action is what the request does when it does not run code:
	// ActionSessionCreate. "" is a run of Code.
	Action string `json:"action,omitempty"`
	// Network is the allowlist the run would reach the network under
	// (CODE_EXEC_NETWORK=allowlist), narrowed to the request's own
	// (sandbox.Request.Network) where it has one; nil without a network.
	Network *egress.PolicyInfo `json:"network_policy,omitempty"`
}

// ActionSessionCreate is the Action of a request to create a session with
// packages (session_create, a sandbox.Request with NewSession): its Code is
// empty, and what it asks for is a session of Language whose calls can
// import Packages.
const ActionSessionCreate = "session_create"

// Describe is req as a person approving it and the audit record see it,
// asked by requester of a Runner with caps: a new ID, created now, without
// Reasons or Deadline (the Gate's).
func Describe(req sandbox.Request, requester Requester, caps sandbox.Capabilities) Ask {
	a := Ask{
		ID:         newID(),
		Language:   req.Language,
		Code:       req.Code,
		StdinBytes: len(req.Stdin),
		Stdin:      req.Stdin,
		TimeoutMS:  req.Limits.Timeout.Milliseconds(),
		CodeSHA256: HashRequest(req),
		Requester:  requester,
		Session:    req.Session,
		Created:    time.Now().UTC(),
		Files:      askFiles(req.Files),
		Workspace:  DescribeWorkspace(caps.Workspace),
		Packages:   req.Packages,
		Network:    NetworkPolicy(caps.Egress, req.Network),
	}
	if req.NewSession != nil {
		a.Action = ActionSessionCreate
	}
	return a
}

// AskFile is one file of a request, as a person approving it sees it: all
// of its text, or, for a binary file, what kind of file it is.
type AskFile struct {
	Path   string `json:"path"`
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
	// Text is the file's content when it is text (valid UTF-8 without
	// NUL). The audit log leaves it out: the digest binds it.
	Text string `json:"text,omitempty"`
	// Binary is set when the file is not text; Kind then says what it is,
	// such as "an ELF executable or library" or "a PNG image".
	Binary bool   `json:"binary,omitempty"`
	Kind   string `json:"kind,omitempty"`
}

// NetworkPolicy is the allowlist a run reaches the network under: the
// operator's (info), narrowed to the run's own allowlist (narrow, see
// sandbox.Request.Network) when it has one; nil without a network.
func NetworkPolicy(info *egress.PolicyInfo, narrow *egress.Allowlist) *egress.PolicyInfo {
	if info == nil || narrow == nil {
		return info
	}
	n := *info
	n.Allow = narrow.Strings()
	if n.Allow == nil {
		n.Allow = []string{}
	}
	return &n
}

// DescribeWorkspace says what a run can see of the workspace, for a person
// approving it ("" without one).
func DescribeWorkspace(w *sandbox.WorkspaceStatus) string {
	if w == nil {
		return ""
	}
	mode := "read-only"
	switch {
	case w.Writable:
		mode = "read-write: the code can change or delete its files"
	case !w.Enforced:
		mode = "meant read-only, but not enforced on this host"
	}
	return fmt.Sprintf("the project folder %s, at %s (%s)", w.HostDir, w.Path, mode)
}

// Decision is the answer to an Ask.
type Decision struct {
	ID      string  `json:"id"`
	Outcome Outcome `json:"outcome"`
	// By names who decided: a person's name as the console or CLI gave it,
	// the client for elicitation, or "codeexec" for the server itself.
	By  string    `json:"by"`
	Via Via       `json:"via"`
	At  time.Time `json:"at"`
	// CodeSHA256 is the request hash the decision is for.
	CodeSHA256 string `json:"code_sha256"`
	// Note is an optional reason (for example why a person denied).
	Note string `json:"note,omitempty"`
}

// ErrNotApproved is wrapped by the error a Gate returns when code did not
// run because it was not approved; use errors.As with *DeniedError for the
// decision.
var ErrNotApproved = errors.New("not approved")

// DeniedError is the error of a run that was not approved.
type DeniedError struct{ Decision Decision }

func (e *DeniedError) Error() string { return "approval " + string(e.Decision.Outcome) }

// Unwrap lets errors.Is(err, ErrNotApproved) hold.
func (e *DeniedError) Unwrap() error { return ErrNotApproved }

// Sentence is one sentence for the model that says what happened and what to do.
func (e *DeniedError) Sentence() string {
	d := e.Decision
	by := d.By
	if by == "" {
		by = "the approver"
	}
	switch d.Outcome {
	case OutcomeDenied:
		s := fmt.Sprintf("The code did not run: %s denied approval (via %s)", by, d.Via)
		if d.Note != "" {
			s += ": " + d.Note
		}
		return s + "."
	case OutcomeCancelled:
		return "The code did not run: the approval request was cancelled without an answer, which counts as a denial."
	case OutcomeTimedOut:
		return "The code did not run: nobody approved it before the approval timeout (CODE_EXEC_APPROVAL_TIMEOUT), which counts as a denial."
	case OutcomeWithdrawn:
		return "The code did not run: the request was withdrawn before anyone approved it."
	case OutcomeExpired:
		return "The code did not run: the approval arrived after it expired; call code_execute again to ask anew."
	case OutcomeReplayed:
		return "The code did not run: this approval was already used once, and an approval is good for one run only."
	case OutcomeForged:
		return "The code did not run: the approval was not issued by this server for this exact code, so it was rejected."
	case OutcomeUnavailable:
		return "The code did not run: it needs a person's approval, but this client cannot show approval requests and no approvals console is configured (CODE_EXEC_ADMIN_ADDR)."
	}
	return fmt.Sprintf("The code did not run: approval %s.", d.Outcome)
}

// HashRequest is the hash an approval is bound to: language, code, stdin,
// timeout, files and packages, each length-prefixed so that no two
// requests share a hash.
func HashRequest(req sandbox.Request) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("codeexec-request-v1")
	field(req.Language)
	field(req.Code)
	field(req.Stdin)
	field(req.Limits.Timeout.String())
	if len(req.Files) > 0 {
		// Only requests with files hash them, so that the hash of every
		// other request stays what it was.
		field("files")
		for _, f := range req.Files {
			field(f.Path)
			field(string(f.Data))
		}
	}
	if len(req.Packages) > 0 {
		// Likewise only requests with packages hash them.
		field("packages")
		for _, p := range req.Packages {
			field(p)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// newID returns a random request id (12 hex digits).
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
