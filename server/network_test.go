package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

func TestExecuteReportsNetwork(t *testing.T) {
	t.Parallel()
	rep := &egress.Report{
		Reached: []egress.Reached{{Host: "allowed.test", Port: 443, Address: "127.0.0.1", Connections: 2, BytesSent: 10, BytesReceived: 20}},
		Refused: []egress.Refused{{Host: "notlisted.test", Port: 80, Reason: egress.ReasonNotAllowed, Count: 1}},
	}
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		return &sandbox.Result{Sandbox: sandbox.ModeProcess, Network: rep}, nil
	})
	res, err := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x"}))
	if err != nil || res.IsError {
		t.Fatalf("handleExecute = %+v, %v", res, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out struct {
		Network struct {
			Reached []map[string]any `json:"reached"`
			Refused []map[string]any `json:"refused"`
		} `json:"network"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Network.Reached) != 1 || out.Network.Reached[0]["host"] != "allowed.test" ||
		len(out.Network.Refused) != 1 || out.Network.Refused[0]["reason"] != "not_allowed" {
		t.Fatalf("structured network = %s", b)
	}
	text := resultText(res)
	for _, want := range []string{"reached allowed.test:443 (127.0.0.1, 2 connections", "refused notlisted.test:80 (not on the allowlist"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

func TestExecuteWithoutNetworkHasNoNetworkField(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, nil)
	res, _ := s.handleExecute(context.Background(), call(map[string]any{"language": "python", "code": "x"}))
	b, _ := json.Marshal(res.StructuredContent)
	if strings.Contains(string(b), `"network"`) || strings.Contains(resultText(res), "network:") {
		t.Fatalf("a run without the proxy reports a network: %s", b)
	}
}

func TestInfoShowsNetworkPolicy(t *testing.T) {
	t.Parallel()
	allow, _ := egress.ParseAllowlist([]string{"pypi.org", "*.example.com:8443"})
	info := egress.Policy{Allow: allow}.Info(true, "127.0.0.1:3128")
	for _, tt := range []struct {
		name     string
		iso      sandbox.Isolation
		info     *egress.PolicyInfo
		want     string
		openHint bool
	}{
		{"none", sandbox.Isolation{Network: true}, nil, "none:", false},
		{"allowlist", sandbox.Isolation{Network: true}, info, "allowlist:", true},
		{"not enforced", sandbox.Isolation{}, &egress.PolicyInfo{Allow: []string{"pypi.org"}}, "NOT enforced", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Isolation: tt.iso, Egress: tt.info}}
			s := New(fake, testOptions())
			got := s.Info()
			if !strings.HasPrefix(got.Network, tt.want) && !strings.Contains(got.Network, tt.want) {
				t.Errorf("network = %q, want %q", got.Network, tt.want)
			}
			if got.NetworkPolicy != tt.info {
				t.Errorf("network_policy = %+v, want %+v", got.NetworkPolicy, tt.info)
			}
			if h := executeTool(fake.Caps, &Options{}).Annotations.OpenWorldHint; *h != tt.openHint {
				t.Errorf("openWorldHint = %v, want %v", *h, tt.openHint)
			}
		})
	}
	if got := strings.Join(info.Allow, ","); got != "pypi.org,*.example.com:8443" {
		t.Fatalf("allow = %q", got)
	}
}

// TestRefusalTextRepeatsNoWord: for a refusal of every reason, made by the
// real egress proxy, neither its detail nor its line in the text result
// says a word twice in a row, and neither restates the reason: the detail
// says only what the reason does not.
func TestRefusalTextRepeatsNoWord(t *testing.T) {
	t.Parallel()
	e := sandboxtest.StartEgress(t, "127.0.0.1")
	_, closed, _ := net.SplitHostPort(sandboxtest.RefusingAddr(t)) // refuses every connection
	h := strconv.Itoa(e.HTTPPort)
	// serve runs the requests through a session of the real proxy (one
	// connection each) and returns its report.
	serve := func(allowPrivate bool, requests ...string) *egress.Report {
		t.Helper()
		pol := e.Policy(t, allowPrivate)
		own := append(e.Allow(), "unpinned.test", "allowed.test:"+closed)
		pol.Allow, _ = egress.ParseAllowlist(append(own, "narrowed.test"))
		pol.Caps.Connections = 2
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := proxy.New(pol, nil).Serve("refusals", ln)
		narrow, _ := egress.ParseAllowlist(own)
		s.Restrict(narrow)
		for _, req := range requests {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(time.Minute)) // bounds a hang only
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
				t.Fatalf("%q: %v", req, err)
			}
			_ = c.Close()
		}
		return s.Close()
	}
	get := func(hostport string) string {
		return "GET http://" + hostport + "/ HTTP/1.1\r\nHost: " + hostport + "\r\n\r\n"
	}
	rep := serve(false,
		get("notlisted.test:"+h),                                          // not_allowed
		"CONNECT allowed.test:1 HTTP/1.1\r\nHost: allowed.test:1\r\n\r\n", // port
		get("narrowed.test"),                                              // not_allowed: the run's own allowlist
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",                               // bad_request
		get("unpinned.test"),                                              // unresolved (connection 1)
		get("private.test:"+h),                                            // private_address (connection 2)
		get("allowed.test:"+h),                                            // cap
	)
	rep.Refused = append(rep.Refused, serve(true, get("allowed.test:"+closed)).Refused...) // unreachable
	sentinel := map[egress.Reason]error{
		egress.ReasonNotAllowed: egress.ErrNotAllowed, egress.ReasonPort: egress.ErrPort,
		egress.ReasonPrivateAddress: egress.ErrPrivateAddress, egress.ReasonCap: egress.ErrCap,
		egress.ReasonUnresolved: egress.ErrUnresolved, egress.ReasonUnreachable: egress.ErrUnreachable,
		egress.ReasonBadRequest: egress.ErrBadRequest,
	}
	seen := map[egress.Reason]bool{}
	for _, r := range rep.Refused {
		seen[r.Reason] = true
		line := renderNetwork(&egress.Report{Refused: []egress.Refused{r}})
		t.Logf("%s: detail %q; text %q", r.Reason, r.Detail, line)
		for _, s := range []string{r.Detail, line} {
			if w := repeatedWord(s); w != "" {
				t.Errorf("%s: %q says %q twice in a row", r.Reason, s, w)
			}
		}
		if strings.Contains(r.Detail, sentinel[r.Reason].Error()) {
			t.Errorf("%s: the detail %q restates the reason (%q)", r.Reason, r.Detail, sentinel[r.Reason])
		}
	}
	for _, reason := range egress.Reasons() {
		if !seen[reason] {
			t.Errorf("no refusal for the reason %s: report %+v", reason, rep.Refused)
		}
	}
}

// repeatedWord returns a word that s says twice in a row ("address:
// address"), regardless of case and of the punctuation between them, or "".
func repeatedWord(s string) string {
	words := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune(".-_'", r)
	})
	for i := 1; i < len(words); i++ {
		if w := strings.Trim(words[i], ".'"); w != "" && w == strings.Trim(words[i-1], ".'") {
			return w
		}
	}
	return ""
}
