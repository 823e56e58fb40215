package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

func TestExecuteReportsNetwork(t *testing.T) {
	t.Parallel()
	rep := &egress.Report{
		Reached: []egress.Reached{{Host: "allowed.test", Port: 443, Address: "127.0.0.1", Connections: 2, BytesSent: 10, BytesReceived: 20}},
		Refused: []egress.Refused{{Host: "notlisted.test", Port: 80, Reason: egress.ReasonNotAllowed, Detail: "host not on the allowlist: notlisted.test", Count: 1}},
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
