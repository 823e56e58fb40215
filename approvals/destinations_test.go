package approvals

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

func TestDestinations(t *testing.T) {
	t.Parallel()
	code := `import urllib.request, socket
urllib.request.urlopen("https://PyPI.org/simple/")
urllib.request.urlopen('http://api.example.com:8080/x?u=https://pypi.org/')
s = socket.create_connection(("db.internal", 5432))
fetch("wss://user:pw@[2001:db8::1]:9000/ws")
exec 3<>/dev/tcp/10.0.0.1/22
`
	var got []string
	for _, d := range Destinations(code) {
		got = append(got, d.String()+"@"+string(rune('0'+d.Line)))
	}
	want := []string{"pypi.org:443@2", "api.example.com:8080@3", "db.internal:5432@4", "[2001:db8::1]:9000@5", "10.0.0.1:22@6"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Destinations = %q, want %q", got, want)
	}
	if d := Destinations("print('no network here: 3.14')"); len(d) != 0 {
		t.Fatalf("Destinations of plain code = %+v", d)
	}
}

func TestAssessNamesDestinationsAndTheAllowlist(t *testing.T) {
	t.Parallel()
	code := "import urllib.request\nurllib.request.urlopen('https://pypi.org/')\nurllib.request.urlopen('http://evil.example/')\n"
	reasons := strings.Join(Reasons(Assess("python", code)), "\n")
	if !strings.Contains(reasons, `names the destinations "pypi.org:443", "evil.example:80" (line 2)`) {
		t.Fatalf("Assess reasons:\n%s", reasons)
	}
	allow, _ := egress.ParseAllowlist([]string{"pypi.org"})
	policy := egress.Policy{Allow: allow}.Info(true, "")
	reasons = strings.Join(Reasons(AllowlistFindings(code, policy)), "\n")
	if !strings.Contains(reasons, `"evil.example:80" is not allowed by the network allowlist and will be refused (line 3)`) || strings.Contains(reasons, `"pypi.org:443" is not allowed`) {
		t.Fatalf("AllowlistFindings reasons:\n%s", reasons)
	}
}

// The audit record carries the network policy of the request and what the
// run reached and was refused.
func TestAuditRecordsNetwork(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	allow, _ := egress.ParseAllowlist([]string{"pypi.org"})
	fake := &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Egress: egress.Policy{Allow: allow}.Info(true, "127.0.0.1:3128")},
		RunFunc: func(context.Context, sandbox.Request) (*sandbox.Result, error) {
			return &sandbox.Result{Sandbox: sandbox.ModeProcess, Network: &egress.Report{
				Reached: []egress.Reached{{Host: "pypi.org", Port: 443, Address: "192.0.2.1", Connections: 1}},
				Refused: []egress.Refused{{Host: "evil.example", Port: 80, Reason: egress.ReasonNotAllowed, Count: 1}},
			}}, nil
		},
	}
	g := NewGate(fake, GateConfig{Policy: PolicyNever, Audit: log, Logger: slog.New(slog.DiscardHandler)})
	defer g.Close()
	if _, err := g.Run(context.Background(), sandboxtest.Req("python", "print(1)")); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyFile(path); err != nil {
		t.Fatalf("the audit log does not verify: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var req, run *Entry
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		switch e.Event {
		case EventRequest:
			req = &e
		case EventRun:
			run = &e
		}
	}
	if req == nil || req.NetworkPolicy == nil || !reflect.DeepEqual(req.NetworkPolicy.Allow, []string{"pypi.org"}) {
		t.Fatalf("request entry = %+v", req)
	}
	if run == nil || run.Network == nil || len(run.Network.Reached) != 1 || run.Network.Refused[0].Reason != egress.ReasonNotAllowed {
		t.Fatalf("run entry = %+v", run)
	}
}

// The approver reads, among the reasons, which destinations the allowlist
// would refuse.
func TestGateTellsWhichDestinationsTheAllowlistRefuses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	allow, _ := egress.ParseAllowlist([]string{"pypi.org"})
	fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Egress: egress.Policy{Allow: allow}.Info(true, "")}}
	g := NewGate(fake, GateConfig{Policy: PolicyRisky, Audit: log, Logger: slog.New(slog.DiscardHandler)})
	defer g.Close()
	code := "import urllib.request\nurllib.request.urlopen('https://pypi.org/')\nurllib.request.urlopen('http://evil.example/')\n"
	if _, err := g.Run(context.Background(), sandboxtest.Req("python", code)); err == nil {
		t.Fatal("risky code ran with no way to ask a person")
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `\"evil.example:80\" is not allowed by the network allowlist and will be refused (line 3)`) {
		t.Fatalf("the request's reasons do not name the refused destination:\n%s", b)
	}
}
