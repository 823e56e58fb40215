package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/approvals/audit"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/server"
)

const testAdminToken = "0123456789abcdef-admin"

// adminFixture is a Gate with an audit log, served by the approvals
// console's API on a loopback httptest server.
type adminFixture struct {
	gate  *approvals.Gate
	srv   *httptest.Server
	audit string
}

func newAdminFixture(t *testing.T, token string) adminFixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	rec := audit.Wrap(&sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}}, log, slog.New(slog.DiscardHandler))
	gate := approvals.NewGate(rec,
		approvals.GateConfig{Policy: approvals.PolicyAlways, Timeout: time.Minute, Record: rec, OutOfBand: true, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { gate.Close() })
	srv := httptest.NewServer(server.NewAdmin(gate, log, token, slog.New(slog.DiscardHandler)).Handler())
	t.Cleanup(srv.Close)
	return adminFixture{gate: gate, srv: srv, audit: path}
}

// startRun starts a run that waits for approval and returns it, with the
// channel of its result, once it is pending.
func (f adminFixture) startRun(t *testing.T, code string) (approvals.Ask, chan error) {
	t.Helper()
	return f.start(t, approvals.Requester{Client: "test-client 1.0", Transport: "stdio"}, sandbox.Request{Language: "python", Code: code, Limits: sandbox.Limits{Timeout: time.Second}})
}

// start starts req, asked by requester, and returns it, with the channel
// of its result, once it is pending.
func (f adminFixture) start(t *testing.T, requester approvals.Requester, req sandbox.Request) (approvals.Ask, chan error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := f.gate.Run(approvals.WithCall(context.Background(), approvals.Call{Requester: requester}), req)
		errc <- err
	}()
	// The broker's changes wake the wait; the minute only bounds a hang.
	wait, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for v := uint64(0); wait.Err() == nil; {
		var asks []approvals.Ask
		if asks, v = f.gate.Broker().Changes(wait, v); len(asks) > 0 {
			return asks[0], errc
		}
	}
	t.Fatal("the run never became pending")
	return approvals.Ask{}, nil
}

func TestApprovalsCLI(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, testAdminToken)
	env := []string{"CODE_EXEC_ADMIN_ADDR=" + strings.TrimPrefix(f.srv.URL, "http://"), "CODE_EXEC_ADMIN_TOKEN=" + testAdminToken}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := approvalsCommand(args, env, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, _ := run("list"); code != 0 || !strings.Contains(out, "No run is waiting") {
		t.Fatalf("list (empty) = %d %q", code, out)
	}
	ask, errc := f.startRun(t, "import socket\nprint('\x1b[2J')")
	code, out, _ := run("list")
	if code != 0 || !strings.Contains(out, ask.ID) || !strings.Contains(out, "import socket") || !strings.Contains(out, "test-client 1.0") || strings.Contains(out, "\x1b") {
		t.Fatalf("list = %d %q", code, out)
	}
	if code, out, _ := run("list", "--json"); code != 0 || !strings.Contains(out, `"id": "`+ask.ID+`"`) {
		t.Fatalf("list --json = %d %q", code, out)
	}
	if code, out, errs := run("approve", "--by", "carol", ask.ID); code != 0 || !strings.Contains(out, "approved by carol (cli") {
		t.Fatalf("approve = %d %q %q", code, out, errs)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run("deny", ask.ID); code != 1 || !strings.Contains(errs, "already decided") {
		t.Fatalf("deny after approve = %d %q", code, errs)
	}
	ask2, errc2 := f.startRun(t, "print(3)")
	if code, out, _ := run("deny", ask2.ID); code != 0 || !strings.Contains(out, "denied") {
		t.Fatalf("deny = %d %q", code, out)
	}
	if err := <-errc2; !errors.Is(err, approvals.ErrNotApproved) {
		t.Fatalf("denied run: %v", err)
	}
	if code, _, errs := run("approve", "nope"); code != 1 || !strings.Contains(errs, "no pending request") {
		t.Fatalf("approve unknown = %d %q", code, errs)
	}
	if code, _, _ := run("approve"); code != 2 {
		t.Fatalf("approve without id = %d, want 2", code)
	}
	// Wrong token.
	env[1] = "CODE_EXEC_ADMIN_TOKEN=wrong-token-0123456789"
	if code, _, errs := run("list"); code != 1 || !strings.Contains(errs, "401") {
		t.Fatalf("wrong token = %d %q", code, errs)
	}

	// codeexec audit verify on the log these decisions wrote, then tampered.
	var out2, errb bytes.Buffer
	if code := auditCommand([]string{"verify", f.audit}, &out2, &errb); code != 0 || !strings.Contains(out2.String(), "intact") {
		t.Fatalf("audit verify = %d %q %q", code, out2.String(), errb.String())
	}
	b, _ := os.ReadFile(f.audit)
	tampered := filepath.Join(t.TempDir(), "tampered.jsonl")
	os.WriteFile(tampered, bytes.Replace(b, []byte(`"outcome":"denied"`), []byte(`"outcome":"approved"`), 1), 0o600)
	errb.Reset()
	if code := auditCommand([]string{"verify", tampered}, &out2, &errb); code != 1 || !strings.Contains(errb.String(), "was changed") {
		t.Fatalf("audit verify (tampered) = %d %q", code, errb.String())
	}
}

// TestApprovalsListShowsEverythingSafely: `codeexec approvals list` shows
// every field a client controls (its name, the code, the files' names and
// text, stdin) with terminal controls, bidirectional and invisible
// characters escaped, never raw: a client name must not repaint the
// terminal, and code must not read otherwise than it runs.
func TestApprovalsListShowsEverythingSafely(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, testAdminToken)
	env := []string{"CODE_EXEC_ADMIN_ADDR=" + strings.TrimPrefix(f.srv.URL, "http://"), "CODE_EXEC_ADMIN_TOKEN=" + testAdminToken}
	elf := append([]byte("\x7fELF\x02\x01\x01\x00"), make([]byte, 56)...)
	req := sandbox.Request{
		Language: "python",
		Code:     "import lib\nif access != \"none\u202e \u2066# admins only\u2069 \u2066\":\n    print('admin')\n",
		Stdin:    "yes\r\n\x1b]0;owned\x07",
		Files: []artifacts.Input{
			{Path: "invoice\u202efdp.py", Data: []byte("print('invoice')\n")},
			{Path: "lib.py", Data: []byte("import os # \x1b[2K\rnothing to see\u200b\n")},
			{Path: "tool.so", Data: elf},
		},
		Limits: sandbox.Limits{Timeout: time.Second},
	}
	requester := approvals.Requester{Client: "evil 1.0\x1b[2K\ralice's laptop (verified)\u202e\u200b", Transport: "http", Remote: "10.0.0.9:5555"}
	ask, errc := f.start(t, requester, req)
	var out, errb bytes.Buffer
	if code := approvalsCommand([]string{"list"}, env, &out, &errb); code != 0 {
		t.Fatalf("list = %d %q", code, errb.String())
	}
	shown := out.String()
	for _, r := range shown {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) || strings.ContainsRune("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u200e\u200f", r) {
			t.Errorf("list printed the raw character %U:\n%s", r, shown)
			break
		}
	}
	for _, w := range []string{
		"U+001B", "U+000D", "U+202E", "U+2066", "U+200B", // the escapes
		"alice's laptop (verified)", "10.0.0.9:5555",
		"invoice", "fdp.py", "lib.py", "import os", "tool.so", "ELF", "64 bytes", ask.Files[2].SHA256, // every file: name, text or kind, size, digest
		"yes", "owned", // stdin
	} {
		if !strings.Contains(shown, w) {
			t.Errorf("list does not show %q:\n%s", w, shown)
		}
	}
	out.Reset()
	if code := approvalsCommand([]string{"list", "--json"}, env, &out, &errb); code != 0 {
		t.Fatalf("list --json = %d %q", code, errb.String())
	}
	for _, r := range out.String() {
		if r == 0x1b || r == '\r' || strings.ContainsRune("\u202e\u2066\u200b", r) {
			t.Errorf("list --json printed the raw character %U:\n%s", r, out.String())
			break
		}
	}
	var back []approvals.Ask
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || len(back) != 1 || back[0].Requester.Client != requester.Client || back[0].Code != req.Code {
		t.Errorf("list --json does not decode to the request as sent: %v %+v", err, back)
	}
	if _, err := f.gate.Broker().Decide(approvals.Decision{ID: ask.ID, Outcome: approvals.OutcomeDenied, By: "test", Via: approvals.ViaCLI}); err != nil {
		t.Fatal(err)
	}
	<-errc
}

// A session's creation with packages runs no code: the CLI says what it
// asks for and shows its packages, and prints no empty code block.
func TestApprovalsListShowsASessionCreation(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, testAdminToken)
	env := []string{"CODE_EXEC_ADMIN_ADDR=" + strings.TrimPrefix(f.srv.URL, "http://"), "CODE_EXEC_ADMIN_TOKEN=" + testAdminToken}
	requester := approvals.Requester{Client: "agent 1.0", Transport: "stdio"}
	ask, errc := f.start(t, requester, sandbox.Request{Language: "python", Packages: []string{"tabulate==0.9.0"}, Limits: sandbox.Limits{Timeout: time.Second}, NewSession: &sandbox.NewSession{}})
	var out, errb bytes.Buffer
	if code := approvalsCommand([]string{"list"}, env, &out, &errb); code != 0 {
		t.Fatalf("list = %d %q", code, errb.String())
	}
	shown := out.String()
	for _, w := range []string{"to create a python session", "tabulate==0.9.0", ask.ID} {
		if !strings.Contains(shown, w) {
			t.Errorf("list does not show %q:\n%s", w, shown)
		}
	}
	if strings.Contains(shown, "code:") {
		t.Errorf("list shows a code block for a request that runs no code:\n%s", shown)
	}
	if _, err := f.gate.Broker().Decide(approvals.Decision{ID: ask.ID, Outcome: approvals.OutcomeDenied, By: "test", Via: approvals.ViaCLI}); err != nil {
		t.Fatal(err)
	}
	<-errc
}

// TestApprovalsFlagsAfterTheID: the documented `codeexec approvals approve
// ID --by NAME --note TEXT` works, as does every order of flags and id for
// approve and deny; -- ends the flags; anything but one id is refused with
// a line that says what was given.
func TestApprovalsFlagsAfterTheID(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, testAdminToken)
	env := []string{"CODE_EXEC_ADMIN_ADDR=" + strings.TrimPrefix(f.srv.URL, "http://"), "CODE_EXEC_ADMIN_TOKEN=" + testAdminToken}
	for _, c := range []struct {
		args    func(id string) []string
		outcome approvals.Outcome
		by      string
		note    string
	}{
		{func(id string) []string { return []string{"approve", id, "--by", "alice", "--note", "looks fine"} }, approvals.OutcomeApproved, "alice", "looks fine"},
		{func(id string) []string { return []string{"deny", id, "--note", "no network, please"} }, approvals.OutcomeDenied, "", "no network, please"},
		{func(id string) []string { return []string{"approve", "--by=bob", id, "-note", "mixed"} }, approvals.OutcomeApproved, "bob", "mixed"},
		{func(id string) []string { return []string{"deny", "--note", "--", "--by", "carol", id} }, approvals.OutcomeDenied, "carol", "--"},
		{func(id string) []string { return []string{"approve", "--by", "dave", "--", id} }, approvals.OutcomeApproved, "dave", ""},
	} {
		ask, errc := f.startRun(t, "print(1)")
		args := c.args(ask.ID)
		var out, errb bytes.Buffer
		if code := approvalsCommand(args, env, &out, &errb); code != 0 || !strings.Contains(out.String(), string(c.outcome)) {
			t.Fatalf("%q = %d %q %q, want 0 and %s", args, code, out.String(), errb.String(), c.outcome)
		}
		<-errc
		var got audit.Entry
		for _, e := range auditEntries(t, f.audit) {
			if e.Event == audit.EventDecision && e.ID == ask.ID {
				got = e
			}
		}
		if got.Outcome != c.outcome || got.Note != c.note || c.by != "" && !strings.HasPrefix(got.By, c.by) {
			t.Errorf("%q: the audit log records %+v, want %s by %q with the note %q", args, got, c.outcome, c.by, c.note)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"approve", "abc", "def", "--by", "x"}, "give exactly one request id, not 2 (abc def)"},
		{[]string{"deny", "--note", "why"}, "give exactly one request id, not 0"},
		{[]string{"approve", "abc", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"list", "--json", "abc"}, "Usage:"},
	} {
		var out, errb bytes.Buffer
		if code := approvalsCommand(c.args, env, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q = %d %q, want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// auditEntries reads the entries of the audit log at path.
func auditEntries(t *testing.T, path string) []audit.Entry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Entry
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var e audit.Entry
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// TestAuditLogError: an audit log that cannot be opened is named with what
// is wrong and the fix, whatever the reason.
func TestAuditLogError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "missing", "audit.jsonl")
	for _, c := range []struct {
		path string
		err  error
		want string
	}{
		{path, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOENT}, "CODE_EXEC_AUDIT_LOG=" + path + " cannot be opened: no such file or directory; create its folder (mkdir -p " + filepath.Dir(path) + ") or name a file in a folder that exists"},
		{path, &fs.PathError{Op: "open", Path: path, Err: syscall.EACCES}, "cannot be opened: permission denied; the server's user (uid " + strconv.Itoa(os.Geteuid()) + ") may not write there: name a file it may write, or change the permissions"},
		{path, &fs.PathError{Op: "open", Path: path, Err: syscall.EROFS}, "cannot be opened: read-only file system; name a file that the server's user"},
		{dir, &fs.PathError{Op: "open", Path: dir, Err: syscall.EISDIR}, "CODE_EXEC_AUDIT_LOG=" + dir + " is a folder: name a file in it, such as " + filepath.Join(dir, "audit.jsonl")},
		{path, fmt.Errorf("the audit log %s does not verify (move it aside to start a new one): %w", path, audit.ErrTampered), "CODE_EXEC_AUDIT_LOG: the audit log " + path + " does not verify (move it aside"},
	} {
		if got := auditLogError(c.path, c.err).Error(); !strings.Contains(got, c.want) {
			t.Errorf("auditLogError(%v) = %q, want it to say %q", c.err, got, c.want)
		}
	}
}
