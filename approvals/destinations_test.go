package approvals

import (
	"context"
	"log/slog"
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

// The approver reads, among the reasons, which destinations the allowlist
// would refuse.
func TestGateTellsWhichDestinationsTheAllowlistRefuses(t *testing.T) {
	t.Parallel()
	allow, _ := egress.ParseAllowlist([]string{"pypi.org"})
	fake := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess, Egress: egress.Policy{Allow: allow}.Info(true, "")}}
	rec := &memoryRecord{}
	g := NewGate(fake, GateConfig{Policy: PolicyRisky, Record: rec, Logger: slog.New(slog.DiscardHandler)})
	defer g.Close()
	code := "import urllib.request\nurllib.request.urlopen('https://pypi.org/')\nurllib.request.urlopen('http://evil.example/')\n"
	if _, err := g.Run(context.Background(), sandboxtest.Req("python", code)); err == nil {
		t.Fatal("risky code ran with no way to ask a person")
	}
	if asks := rec.requests(); len(asks) != 1 || !strings.Contains(strings.Join(asks[0].Reasons, "\n"), `"evil.example:80" is not allowed by the network allowlist and will be refused (line 3)`) {
		t.Fatalf("the request's reasons do not name the refused destination: %+v", asks)
	}
}
