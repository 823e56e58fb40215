package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/server"
)

// adminClient talks to the admin listener of a running codeexec (the API
// that the approvals console uses).
type adminClient struct {
	// BaseURL is http://host:port of CODE_EXEC_ADMIN_ADDR.
	BaseURL string
	// Token is the console's token: CODE_EXEC_ADMIN_TOKEN, or the one the
	// server wrote to its token file.
	Token string
	HTTP  *http.Client
}

func (c *adminClient) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set(server.AdminHeader, "cli")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the approvals console at %s (is codeexec running with CODE_EXEC_APPROVAL set, and is CODE_EXEC_ADMIN_ADDR the same?): %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		if e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
		}
		return &adminError{Status: resp.StatusCode, Msg: e.Error}
	}
	return json.Unmarshal(raw, out)
}

// adminError is an error answer of the admin API.
type adminError struct {
	Status int
	Msg    string
}

func (e *adminError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Msg, e.Status) }

// Pending lists the requests waiting for approval.
func (c *adminClient) Pending(ctx context.Context) (server.PendingList, error) {
	var out server.PendingList
	err := c.do(ctx, http.MethodGet, "/api/pending", nil, &out)
	return out, err
}

// Answer approves (approve true) or denies request id.
func (c *adminClient) Answer(ctx context.Context, id string, approve bool, a server.Answer) (approvals.Decision, error) {
	action := "deny"
	if approve {
		action = "approve"
	}
	var out struct {
		Decision approvals.Decision `json:"decision"`
	}
	err := c.do(ctx, http.MethodPost, "/api/requests/"+id+"/"+action, a, &out)
	return out.Decision, err
}

// adminBaseURL is the console's URL from the environment.
func adminBaseURL(env map[string]string) string {
	addr := env["CODE_EXEC_ADMIN_ADDR"]
	if addr == "" {
		addr = "127.0.0.1:8081"
	}
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return addr
	}
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	addr = strings.Replace(addr, "0.0.0.0:", "127.0.0.1:", 1)
	return "http://" + addr
}

func defaultApprover() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		name += "@" + h
	}
	return name
}

// approvalsCommand runs `codeexec approvals list|approve|deny` with args
// (after "approvals") and returns the exit status: 0 done, 1 failed, 2 usage.
func approvalsCommand(args, environ []string, stdout, stderr io.Writer) int {
	env := envMap(environ)
	usage := func() {
		fmt.Fprint(stderr, `Usage:
  codeexec approvals list [--json]
  codeexec approvals approve ID [--by NAME] [--note TEXT]
  codeexec approvals deny    ID [--by NAME] [--note TEXT]

Flags may come before or after the ID; -- ends them (for an ID that begins with -).

Talks to the approvals console of a running codeexec at CODE_EXEC_ADMIN_ADDR
(default 127.0.0.1:8081) with its token: CODE_EXEC_ADMIN_TOKEN if set, else the
token the server wrote at start to CODE_EXEC_ADMIN_TOKEN_FILE (by default
$XDG_RUNTIME_DIR/codeexec/admin-HOST-PORT.token, or the same name in
~/.cache/codeexec without XDG_RUNTIME_DIR).
`)
	}
	if len(args) == 0 {
		usage()
		return 2
	}
	fs := flag.NewFlagSet("codeexec approvals "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print JSON")
	by := fs.String("by", defaultApprover(), "who decides (recorded in the audit log)")
	note := fs.String("note", "", "why (recorded in the audit log)")
	addr := fs.String("addr", "", "admin address (overrides CODE_EXEC_ADMIN_ADDR)")
	operands, err := parseInterspersed(fs, args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "codeexec approvals: %v\n", err)
		usage()
		return 2
	}
	if *addr != "" {
		env["CODE_EXEC_ADMIN_ADDR"] = *addr
	}
	base := adminBaseURL(env)
	var host string
	if u, err := url.Parse(base); err == nil {
		host = u.Host
	}
	token, err := readAdminToken(env, host)
	if err != nil {
		fmt.Fprintf(stderr, "codeexec approvals: %v\n", err)
		return 1
	}
	c := &adminClient{BaseURL: base, Token: token}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch args[0] {
	case "list", "ls":
		if len(operands) != 0 {
			usage()
			return 2
		}
		list, err := c.Pending(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "codeexec approvals: %s\n", shown(err.Error()))
			return 1
		}
		for _, r := range list.Replicas {
			if r.Error != "" {
				fmt.Fprintf(stderr, "codeexec approvals: the requests of replica %s are not listed: %s\n", shown(r.ID), shown(r.Error))
			}
		}
		if *asJSON {
			b, _ := json.MarshalIndent(list.Pending, "", "  ")
			_, _ = stdout.Write(append(approvals.EscapeHiddenJSON(b), '\n'))
			return 0
		}
		if len(list.Pending) == 0 {
			fmt.Fprintln(stdout, "No run is waiting for approval.")
			return 0
		}
		for _, a := range list.Pending {
			printAsk(stdout, a)
		}
		return 0
	case "approve", "deny":
		if len(operands) != 1 {
			fmt.Fprintf(stderr, "codeexec approvals %s: give exactly one request id, not %d (%s); flags such as --by and --note may come before or after it (see codeexec approvals list)\n",
				args[0], len(operands), shown(strings.Join(operands, " ")))
			return 2
		}
		id := operands[0]
		d, err := c.Answer(ctx, id, args[0] == "approve", server.Answer{By: *by, Note: *note})
		if err != nil {
			var ae *adminError
			if errors.As(err, &ae) && ae.Status == http.StatusConflict {
				fmt.Fprintf(stderr, "codeexec approvals: request %s was already decided; the first answer stands\n", shown(id))
				return 1
			}
			fmt.Fprintf(stderr, "codeexec approvals: %s\n", shown(err.Error()))
			return 1
		}
		fmt.Fprintf(stdout, "%s: %s by %s\n", shown(d.ID), shown(string(d.Outcome)), shown(d.By))
		return 0
	}
	fmt.Fprintf(stderr, "codeexec approvals: unknown command %q\n", args[0])
	usage()
	return 2
}

// parseInterspersed parses args with fs, flags and operands in any order
// (approve ID --by NAME as well as approve --by NAME ID), and returns the
// operands in their order. "--" ends the flags: what follows it is operands
// all, unless it is the value of the flag before it (--note --).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return operands, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" && !(used > 1 && takesValue(fs, args[used-2])) {
			return append(operands, rest...), nil
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}

// takesValue reports whether arg is a flag of fs that takes the next
// argument as its value (-name or --name, not a boolean, without =value).
func takesValue(fs *flag.FlagSet, arg string) bool {
	name, ok := strings.CutPrefix(arg, "-")
	name = strings.TrimPrefix(name, "-")
	if !ok || name == "" || strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, isBool := f.Value.(interface{ IsBoolFlag() bool })
	return !isBool || !b.IsBoolFlag()
}

// What `codeexec approvals list` prints comes from MCP clients: the code,
// its files, stdin, the client's own name. Every such field is printed
// through approvals.Visible, so that no terminal control sequence acts on
// the operator's terminal and no bidirectional or invisible character
// makes the text read otherwise than it runs: shown for a field on one
// line, printText for a text of many.

// shown is s for one line: every hidden character, tab and newline escaped.
func shown(s string) string { return approvals.VisibleLine(s) }

// printText prints text with a line number before each line, and every
// hidden character escaped: a line that the terminal wraps goes on without
// a number.
func printText(w io.Writer, text string) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i, line := range lines {
		fmt.Fprintf(w, "%6d | %s\n", i+1, approvals.Visible(line))
	}
	if !strings.HasSuffix(text, "\n") && text != "" {
		fmt.Fprintln(w, "       (no newline at the end)")
	}
}

// printAsk prints one pending request: who asks, what it brings and why
// the risk check flagged it, then the code, every file and stdin in full.
func printAsk(w io.Writer, a approvals.Ask) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	row := func(label, value string) { fmt.Fprintf(tw, "%s\t%s\n", label, shown(value)) }
	row("request", a.ID)
	if a.Action == approvals.ActionSessionCreate {
		row("asks", "to create a "+a.Language+" session with the packages below (no code runs now; every call in it is approved on its own)")
	}
	row("language", a.Language)
	if a.Requester.Principal != "" {
		who := a.Requester.Principal
		if a.Requester.Org != "" {
			who += " (org " + a.Requester.Org + ")"
		}
		row("principal", who)
	}
	row("requester", a.Requester.String())
	if a.Session != "" {
		row("session", a.Session)
	}
	row("denied in", time.Until(a.Deadline).Round(time.Second).String())
	row("timeout", (time.Duration(a.TimeoutMS) * time.Millisecond).String())
	row("sha256", a.CodeSHA256)
	if a.Workspace != "" {
		row("workspace", a.Workspace)
	}
	if len(a.Packages) > 0 {
		row("packages", strings.Join(a.Packages, " "))
	}
	for i, f := range a.Files {
		label := ""
		if i == 0 {
			label = "files"
		}
		what := fmt.Sprintf("%s (%d bytes, sha256 %s)", f.Path, f.Size, f.SHA256)
		if f.Binary {
			what += ": " + f.Kind + ", binary, not shown"
		}
		row(label, what)
	}
	if a.StdinBytes > 0 {
		row("stdin", fmt.Sprintf("%d bytes", a.StdinBytes))
	}
	if len(a.Reasons) == 0 {
		row("reasons", "(the risk check flagged nothing)")
	}
	for i, r := range a.Reasons {
		label := ""
		if i == 0 {
			label = "reasons"
		}
		row(label, r)
	}
	_ = tw.Flush()
	if a.Action != approvals.ActionSessionCreate {
		fmt.Fprintln(w, "code:")
		printText(w, a.Code)
	}
	for _, f := range a.Files {
		if !f.Binary {
			fmt.Fprintf(w, "file %s:\n", shown(f.Path))
			printText(w, f.Text)
		}
	}
	if a.Stdin != "" {
		fmt.Fprintln(w, "stdin:")
		printText(w, a.Stdin)
	}
	fmt.Fprintf(w, "\n  codeexec approvals approve %s    codeexec approvals deny %s\n\n", shown(a.ID), shown(a.ID))
}
