package e2e

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestNetworkAllowlist drives CODE_EXEC_NETWORK=allowlist through the real
// binary with the official MCP client, in process and docker mode. The
// destinations are listeners this test starts on this machine (the Docker
// bridge's own address when there is one, else loopback), and every name
// is pinned with CODE_EXEC_NETWORK_RESOLVE: nothing leaves the machine and
// nothing asks DNS.
func TestNetworkAllowlist(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"process", "docker"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ip := "127.0.0.1"
			extra := map[string]string{}
			if mode == "docker" {
				dockerEngine(t)
				if b := bridgeAddr(); b != "" {
					ip = b
				}
				extra["CODE_EXEC_DOCKER_POOL_SIZE"] = "1"
			}
			e := sandboxtest.StartEgress(t, ip)
			extra["CODE_EXEC_SANDBOX"] = mode
			extra["CODE_EXEC_LANGUAGES"] = "python"
			extra["CODE_EXEC_NETWORK"] = "allowlist"
			extra["CODE_EXEC_NETWORK_ALLOW"] = strings.Join(e.Allow(), ",")
			extra["CODE_EXEC_NETWORK_RESOLVE"] = e.Resolve()
			extra["CODE_EXEC_NETWORK_ALLOW_PRIVATE"] = "true"
			extra["CODE_EXEC_TIMEOUT"] = "30s"
			if mode == "process" && os.Getenv("CODE_EXEC_TEST_NO_USERNS") == "1" && os.Geteuid() != 0 {
				// Without user namespaces an ordinary user's runs have no
				// network namespace, so nothing could hold them to the
				// allowlist: the server must refuse to start, saying why.
				cmd := exec.Command(binPath)
				cmd.Env = envList(serverEnv(t, extra))
				cmd.Stdin = strings.NewReader("")
				out, err := cmd.CombinedOutput()
				if err == nil || !strings.Contains(string(out), "CODE_EXEC_NETWORK=allowlist needs process mode's network namespace") {
					t.Fatalf("without a network namespace the server started or did not say why: %v\n%s", err, out)
				}
				return
			}
			cs, _ := connect(t, stdio, serverEnv(t, extra), connectOpts{})
			raws := []string{"127.0.0.1"}
			if ip != "127.0.0.1" {
				raws = append(raws, ip)
			}
			checkAllowlistServer(t, cs, e, raws)
		})
	}
}

// checkAllowlistServer checks, through a server started with e's allowlist
// (private addresses allowed), what sandbox_info says of the policy and what
// a run of e's program reaches, is refused and reports; raws are the
// addresses its raw sockets try, which must all fail.
func checkAllowlistServer(t *testing.T, cs *mcp.ClientSession, e *sandboxtest.Egress, raws []string) {
	t.Helper()
	res := call(t, cs, "sandbox_info", map[string]any{})
	var info struct {
		Network       string             `json:"network"`
		NetworkPolicy *egress.PolicyInfo `json:"network_policy"`
	}
	remarshal(t, res.StructuredContent, &info)
	if info.NetworkPolicy == nil || !info.NetworkPolicy.Enforced || !info.NetworkPolicy.AllowPrivate ||
		strings.Join(info.NetworkPolicy.Allow, ",") != strings.Join(e.Allow(), ",") || !strings.HasPrefix(info.Network, "allowlist:") {
		t.Fatalf("sandbox_info network=%q policy=%+v", info.Network, info.NetworkPolicy)
	}

	res = call(t, cs, "code_execute", map[string]any{"language": "python", "code": e.Program(raws...)})
	var out struct {
		ExitCode int            `json:"exit_code"`
		Stdout   string         `json:"stdout"`
		Stderr   string         `json:"stderr"`
		Network  *egress.Report `json:"network"`
	}
	remarshal(t, res.StructuredContent, &out)
	if res.IsError || out.ExitCode != 0 {
		t.Fatalf("isError=%v exit=%d\nstdout:\n%s\nstderr:\n%s", res.IsError, out.ExitCode, out.Stdout, out.Stderr)
	}
	for name, want := range map[string]string{
		"http":      "200 plain-ok",
		"connect":   "200 tls-ok",
		"notlisted": "HTTP 403",
		"port":      "refused",
	} {
		if got := sandboxtest.Line(out.Stdout, name); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	for _, ip := range raws {
		if got := sandboxtest.Line(out.Stdout, "raw "+ip); !strings.HasPrefix(got, "refused") {
			t.Errorf("raw socket to %s: %q, want refused", ip, got)
		}
	}
	if out.Network == nil {
		t.Fatal("code_execute reports no network")
	}
	reasons := map[string]egress.Reason{}
	for _, r := range out.Network.Refused {
		reasons[r.Host] = r.Reason
	}
	if reasons["notlisted.test"] != egress.ReasonNotAllowed || reasons["allowed.test"] != egress.ReasonPort {
		t.Errorf("refused = %+v, want notlisted.test not_allowed and allowed.test port", out.Network.Refused)
	}
	if len(out.Network.Reached) != 3 {
		t.Errorf("reached = %+v, want allowed.test on both ports and private.test", out.Network.Reached)
	}
	if txt := text(res); !strings.Contains(txt, "refused notlisted.test:") || !strings.Contains(txt, "reached allowed.test:") {
		t.Errorf("the text result does not list the network:\n%s", txt)
	}
}

// TestNetworkNoneIsDefault: without CODE_EXEC_NETWORK nothing changes:
// no network report, no policy, no proxy variables.
func TestNetworkNoneIsDefault(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_LANGUAGES": "python"}), connectOpts{})
	res := call(t, cs, "code_execute", map[string]any{"language": "python", "code": "import os; print(os.environ.get('HTTP_PROXY'))"})
	var out map[string]any
	remarshal(t, res.StructuredContent, &out)
	if _, ok := out["network"]; ok || out["stdout"] != "None\n" {
		t.Fatalf("default run: %v", out)
	}
	res = call(t, cs, "sandbox_info", map[string]any{})
	remarshal(t, res.StructuredContent, &out)
	if _, ok := out["network_policy"]; ok {
		t.Fatalf("sandbox_info has a network policy by default: %v", out["network_policy"])
	}
}

// bridgeAddr is the IPv4 address of the default Docker bridge, or "".
func bridgeAddr() string {
	ifi, err := net.InterfaceByName("docker0")
	if err != nil {
		return ""
	}
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}
