package e2e

import (
	"net"
	"os"
	"os/exec"
	"strconv"
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
			ip := listenAddrFor(t, mode)
			extra := map[string]string{}
			if mode == "docker" {
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

// listenAddrFor is the address a listener of a test should be on for
// runs of mode to reach it through the egress proxy: loopback, or for
// docker mode (which it skips without an engine, see dockerEngine) the
// Docker bridge's own address, which a run container must not reach
// directly.
func listenAddrFor(t *testing.T, mode string) string {
	t.Helper()
	if mode != "docker" {
		return "127.0.0.1"
	}
	dockerEngine(t)
	if b := bridgeAddr(); b != "" {
		return b
	}
	return "127.0.0.1"
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

// TestAllowlistEntriesNeverReachedWarn: an allowlist entry that the egress
// proxy can never let a run reach is named at start, once, with the fix: a
// loopback, private or link-local address, localhost, or a name that
// CODE_EXEC_NETWORK_RESOLVE pins to one, without
// CODE_EXEC_NETWORK_ALLOW_PRIVATE=true; an address that is refused whatever
// it says (documentation) in any case. Entries that can be reached are not
// named. (The server runs in mode none, and to the end of its stdin: the
// warning comes before the mode starts, whatever the mode.)
func TestAllowlistEntriesNeverReachedWarn(t *testing.T) {
	t.Parallel()
	allow := "127.0.0.1:8080,localhost:3000,10.1.2.3,api.test,[fd00::1]:443,192.0.2.7,public.test"
	resolve := "api.test=192.168.1.5,public.test=93.184.215.14"
	const private, remove = "unless CODE_EXEC_NETWORK_ALLOW_PRIVATE=true", "; remove the entry"
	for _, c := range []struct {
		allowPrivate string
		warned       map[string]string // entry: the fix its warning says
	}{
		{"false", map[string]string{"127.0.0.1:8080": private, "localhost:3000": private, "10.1.2.3": private, "api.test": private, "[fd00::1]:443": private, "192.0.2.7": remove}},
		{"true", map[string]string{"192.0.2.7": remove}},
	} {
		t.Run("allow private "+c.allowPrivate, func(t *testing.T) {
			t.Parallel()
			env := serverEnv(t, map[string]string{
				"CODE_EXEC_SANDBOX": "none", "CODE_EXEC_LANGUAGES": "bash",
				"CODE_EXEC_NETWORK": "allowlist", "CODE_EXEC_NETWORK_ALLOW": allow, "CODE_EXEC_NETWORK_RESOLVE": resolve,
				"CODE_EXEC_NETWORK_ALLOW_PRIVATE": c.allowPrivate,
			})
			_, _, stderr := runBinary(t, env)
			counts := map[string]int{}
			for _, line := range strings.Split(stderr, "\n") {
				var rec struct{ Level, Msg string }
				if jsonUnmarshal([]byte(line), &rec) != nil || rec.Level != "WARN" || !strings.Contains(rec.Msg, "can never be reached") {
					continue
				}
				entry := strings.Fields(strings.TrimPrefix(rec.Msg, "CODE_EXEC_NETWORK_ALLOW entry "))[0]
				counts[entry]++
				if fix, ok := c.warned[entry]; ok && !strings.Contains(rec.Msg, fix) {
					t.Errorf("the warning %q does not say %q", rec.Msg, fix)
				}
			}
			for e := range c.warned {
				if counts[e] != 1 {
					t.Errorf("the entry %s is named by %d warnings, want 1", e, counts[e])
				}
				delete(counts, e)
			}
			for e, n := range counts {
				t.Errorf("the entry %s, which can be reached, is named by %d warnings", e, n)
			}
			if t.Failed() {
				t.Logf("stderr:\n%s", stderr)
			}
		})
	}
}

// TestNodeUsesTheProxyAsSaid: javascript runs get NODE_USE_ENV_PROXY=1
// with the proxy variables, and Node.js's fetch and http module go through
// the egress proxy exactly when code_execute's description and sandbox_info
// say they do, which depends on the runs' Node.js (22.21, or 24.5, and
// later). The destination is a listener of this test on an address the
// allowlist names; a request that bypasses the proxy reaches it directly
// (mode none) or fails, and is not in the run's network report.
func TestNodeUsesTheProxyAsSaid(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"none", "process", "docker"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ip := listenAddrFor(t, mode)
			if mode == "process" && os.Getenv("CODE_EXEC_TEST_NO_USERNS") == "1" && os.Geteuid() != 0 {
				t.Skip("without user namespaces an ordinary user's process mode has no network namespace, and refuses CODE_EXEC_NETWORK=allowlist (TestNetworkAllowlist checks that)")
			}
			e := sandboxtest.StartEgress(t, ip)
			dest := net.JoinHostPort(ip, strconv.Itoa(e.HTTPPort))
			cs, _ := connect(t, stdio, serverEnv(t, map[string]string{
				"CODE_EXEC_SANDBOX": mode, "CODE_EXEC_LANGUAGES": "javascript", "CODE_EXEC_TIMEOUT": "30s",
				"CODE_EXEC_NETWORK": "allowlist", "CODE_EXEC_NETWORK_ALLOW": dest, "CODE_EXEC_NETWORK_ALLOW_PRIVATE": "true",
			}), connectOpts{})
			var info struct {
				Network   string `json:"network"`
				Languages []struct {
					Name    string `json:"name"`
					Version string `json:"version"`
				} `json:"languages"`
			}
			remarshal(t, call(t, cs, "sandbox_info", map[string]any{}).StructuredContent, &info)
			var node string
			for _, l := range info.Languages {
				if l.Name == "javascript" {
					node = l.Version
				}
			}
			said := egress.ProxyClients(node)
			if !strings.Contains(info.Network, said) {
				t.Errorf("sandbox_info's network %q does not say %q", info.Network, said)
			}
			for _, tool := range listTools(t, cs).Tools {
				if tool.Name == "code_execute" && !strings.Contains(tool.Description, said) {
					t.Errorf("code_execute's description %q does not say %q", tool.Description, said)
				}
			}
			fetchSaid, httpSaid := egress.NodeProxySupport(node)
			url := "http://" + dest + "/"
			for _, c := range []struct {
				client, code string
				said         bool
			}{
				{"fetch", `fetch(URL).then(r => r.text()).then(b => console.log("got: " + b), e => console.log("failed: " + (e.cause ? e.cause.code || e.cause : e)))`, fetchSaid},
				{"http", `require("http").get(URL, r => { let b = ""; r.on("data", d => b += d); r.on("end", () => console.log("got: " + b)) }).on("error", e => console.log("failed: " + e.code))`, httpSaid},
			} {
				res := call(t, cs, "code_execute", map[string]any{"language": "javascript",
					"code": "const URL = " + strconv.Quote(url) + `; console.log("env: " + process.env.NODE_USE_ENV_PROXY); ` + c.code})
				var out struct {
					Stdout  string         `json:"stdout"`
					Network *egress.Report `json:"network"`
				}
				remarshal(t, res.StructuredContent, &out)
				if got := sandboxtest.Line(out.Stdout, "env"); got != "1" {
					t.Errorf("%s: NODE_USE_ENV_PROXY is %q in the run, want 1", c.client, got)
				}
				proxied := out.Network != nil && len(out.Network.Reached) == 1 && out.Network.Reached[0].Port == e.HTTPPort
				t.Logf("Node.js %s's %s went through the proxy: %v", node, c.client, proxied)
				if proxied != c.said {
					t.Errorf("Node.js %s's %s went through the proxy: %v; what the server says: %v (%q)\nstdout: %s", node, c.client, proxied, c.said, said, out.Stdout)
				}
				if proxied && sandboxtest.Line(out.Stdout, "got") != "plain-ok" {
					t.Errorf("%s through the proxy: %q", c.client, out.Stdout)
				}
			}
		})
	}
}
