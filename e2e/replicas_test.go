package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Replicas behind one address (CODE_EXEC_REPLICA_ID, CODE_EXEC_PEERS):
// the servers run behind HAProxy from Debian, round-robin without
// stickiness, and the go-sdk client talks to HAProxy only.

const peerToken = "e2e-peer-token-0123456789abcdef0123456789"

// replicaSet is codeexec replicas r1, r2 ... and the load balancer before them.
type replicaSet struct {
	ids     []string
	servers map[string]*server
	// metrics are the replicas' metrics addresses (their /readyz), admin
	// their approvals consoles' (used where extra settings say {admin}).
	metrics, admin map[string]string
	lb             *server // baseURL is HAProxy's; transport http
}

// freeAddr is a loopback address nobody listens on (freePort's).
func freeAddr(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }

// startReplicas starts n replicas in process mode on loopback ports, each
// knowing the others, with extra settings, and HAProxy before them.
func startReplicas(t *testing.T, n int, extra map[string]string) *replicaSet {
	t.Helper()
	haproxy := haproxyPath(t)
	rs := &replicaSet{servers: map[string]*server{}, metrics: map[string]string{}, admin: map[string]string{}}
	addrs := map[string]string{}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		rs.ids = append(rs.ids, id)
		addrs[id] = freeAddr(t)
		rs.metrics[id] = freeAddr(t)
		rs.admin[id] = freeAddr(t)
	}
	for _, id := range rs.ids {
		var peers []string
		for _, o := range rs.ids {
			if o != id {
				peers = append(peers, o+"=http://"+addrs[o])
			}
		}
		env := serverEnv(t, map[string]string{
			"CODE_EXEC_SANDBOX":      "process",
			"CODE_EXEC_REPLICA_ID":   id,
			"CODE_EXEC_PEERS":        strings.Join(peers, ","),
			"CODE_EXEC_PEER_TOKEN":   peerToken,
			"CODE_EXEC_METRICS_ADDR": rs.metrics[id],
			"CODE_EXEC_ADMIN_ADDR":   "off",
		})
		for k, v := range extra {
			env[k] = strings.ReplaceAll(v, "{admin}", rs.admin[id])
		}
		rs.servers[id] = startHTTP(t, http_, env, "--addr", addrs[id])
	}
	rs.lb = startHAProxy(t, haproxy, rs, addrs)
	return rs
}

// haproxyPath finds HAProxy, or skips (fails under CODE_EXEC_REQUIRE_HAPROXY=1).
func haproxyPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("haproxy")
	if err == nil {
		return p
	}
	for _, c := range []string{"/usr/sbin/haproxy", "/usr/local/sbin/haproxy"} {
		if _, err := os.Stat(c); err == nil {
			return c
		}
	}
	if os.Getenv("CODE_EXEC_REQUIRE_HAPROXY") == "1" {
		t.Fatal("haproxy is missing and CODE_EXEC_REQUIRE_HAPROXY=1: install it with apt-get install -y haproxy")
	}
	t.Skip("skipping the replicas test: haproxy is missing (apt-get install -y haproxy; set CODE_EXEC_REQUIRE_HAPROXY=1 to make this a failure)")
	return ""
}

// startHAProxy runs HAProxy on a free loopback port before the replicas:
// round-robin, no stickiness, each request balanced on its own; a server
// whose /readyz fails is taken out, and a request whose server refuses the
// connection goes to another.
func startHAProxy(t *testing.T, bin string, rs *replicaSet, addrs map[string]string) *server {
	t.Helper()
	front := freeAddr(t)
	var b strings.Builder
	fmt.Fprintf(&b, `global
  maxconn 512
defaults
  mode http
  timeout connect 5s
  timeout client 10m
  timeout server 10m
  timeout tunnel 10m
  retries 3
  option redispatch
frontend fe
  bind %s
  default_backend be
backend be
  balance roundrobin
  option httpchk
  http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host 127.0.0.1
  default-server inter 300ms fall 1 rise 1
`, front)
	for _, id := range rs.ids {
		_, mport, _ := net.SplitHostPort(rs.metrics[id])
		fmt.Fprintf(&b, "  server %s %s check port %s\n", id, addrs[id], mport)
	}
	cfgPath := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", cfgPath)
	lb := &server{t: t, transport: http_, cmd: cmd, stderr: &lockedBuffer{}, stdout: &lockedBuffer{}, baseURL: "http://" + front, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = lb.stdout, lb.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting haproxy: %v", err)
	}
	go func() {
		_ = cmd.Wait()
		close(lb.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-lb.done
		if t.Failed() {
			t.Logf("haproxy output:\n%s%s", lb.stdout.String(), lb.stderr.String())
		}
	})
	// Ready once every replica is up behind it: /healthz answers through
	// it as many times in a row as there are replicas.
	waitFor(t, eventWait, "haproxy to serve", func() bool {
		for range rs.ids {
			resp, err := http.Get(lb.baseURL + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	}, func() string { return lb.stderr.String() })
	return lb
}

// forwarded reports whether replica id forwarded a request for an id of
// another replica's.
func (rs *replicaSet) forwarded(id string) bool {
	return strings.Contains(rs.servers[id].stderr.String(), `"msg":"forwarding to the owner"`)
}

// other is a replica other than id.
func (rs *replicaSet) other(id string) string {
	for _, o := range rs.ids {
		if o != id {
			if s := rs.servers[o]; s != nil {
				select {
				case <-s.done:
					continue
				default:
				}
			}
			return o
		}
	}
	return ""
}

// owner is the replica an id names.
func owner(id string) string {
	r, _, _ := strings.Cut(id, ".")
	return r
}

// TestReplicasBehindLoadBalancer: three replicas behind HAProxy that
// alternates requests, driven by the go-sdk client with and without MCP
// sessions (protocols 2025-11-25 and 2026-07-28). A session keeps its
// variables over ten calls, a task started on one replica is read and
// cancelled through another, an artifact link resolves; once one replica
// is killed, its ids are answered with "ended because its server
// stopped" and the others keep serving.
func TestReplicasBehindLoadBalancer(t *testing.T) {
	t.Parallel()
	rs := startReplicas(t, 3, nil)
	for _, v := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(v, func(t *testing.T) {
			cs := dial(t, rs.lb, connectOpts{protocolVersion: v})
			if v == "2025-11-25" && rs.servers[owner(cs.ID())] == nil {
				t.Fatalf("MCP session id %q names no replica (want r1., r2. or r3.)", cs.ID())
			}

			t.Run("a session keeps its variables over ten calls", func(t *testing.T) {
				id := createSession(t, cs, map[string]any{"language": "python"})
				home := owner(id)
				if rs.servers[home] == nil || (v == "2025-11-25" && home != owner(cs.ID())) {
					t.Errorf("session id %q, want it to carry the replica of its MCP session %q", id, cs.ID())
				}
				for i := 1; i <= 10; i++ {
					code := "n = n + 1 if 'n' in globals() else 1\nprint(n)"
					res, out := inSession(t, cs, id, "python", code)
					wantStdout(t, res, out, fmt.Sprintf("%d\n", i))
				}
				forwarded := false
				for _, o := range rs.ids {
					forwarded = forwarded || (o != home && rs.forwarded(o))
				}
				if !forwarded {
					t.Errorf("no other replica forwarded a call in the session of %s: the load balancer did not alternate", home)
				}
			})

			t.Run("an artifact link resolves", func(t *testing.T) {
				res, out := execute(t, cs, map[string]any{"language": "python", "code": `open("big.txt", "w").write("x" * 200000)`})
				if res.IsError || out.ExitCode != 0 {
					t.Fatalf("isError=%v exit=%d stderr=%q", res.IsError, out.ExitCode, out.Stderr)
				}
				var link *mcp.ResourceLink
				for _, c := range res.Content {
					if l, ok := c.(*mcp.ResourceLink); ok && l.Name == "big.txt" {
						link = l
					}
				}
				if link == nil || rs.servers[owner(strings.TrimPrefix(link.URI, "codeexec://runs/"))] == nil {
					t.Fatalf("no resource link codeexec://runs/<replica>.…/big.txt in %+v", res.Content)
				}
				for range rs.ids { // through every replica in turn
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
					cancel()
					if err != nil || len(rr.Contents) != 1 || len(rr.Contents[0].Text) != 200000 {
						t.Fatalf("resources/read %s: %v", link.URI, err)
					}
				}
			})
		})
	}

	t.Run("a task started on one replica is read and cancelled through another", func(t *testing.T) {
		start := &taskClient{t: t, url: rs.lb.baseURL + "/mcp", version: "2026-07-28"}
		m := marker()
		id := start.start(fmt.Sprintf(`{"language":"bash","code":"sleep %s; echo finished","timeout_seconds":300}`, m))
		home := owner(id)
		if rs.servers[home] == nil {
			t.Fatalf("task id %q names no replica", id)
		}
		waitAlive(t, m)
		other := &taskClient{t: t, url: rs.servers[rs.other(home)].baseURL + "/mcp", version: "2026-07-28"}
		if got := other.get(id)["status"]; got != "working" {
			t.Fatalf("tasks/get through %s: status %v, want working", rs.other(home), got)
		}
		if _, rerr, _ := other.post("tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, id)); rerr != nil {
			t.Fatalf("tasks/cancel through %s: %v", rs.other(home), rerr)
		}
		waitGone(t, m)
		if got := other.get(id)["status"]; got != "cancelled" {
			t.Errorf("tasks/get after the cancel: status %v, want cancelled", got)
		}
	})

	t.Run("one replica killed: its ids get a clear answer, the others serve", func(t *testing.T) {
		legacy := dial(t, rs.lb, connectOpts{protocolVersion: "2025-11-25"})
		victim := owner(legacy.ID())
		dead := rs.servers[victim]
		// A codeexec session and a task of the victim, without MCP sessions.
		direct := dial(t, dead, connectOpts{})
		sessionID := createSession(t, direct, map[string]any{"language": "python"})
		modern := dial(t, rs.lb, connectOpts{})
		c := &taskClient{t: t, url: dead.baseURL + "/mcp", version: "2026-07-28"}
		m := marker()
		taskID := c.start(fmt.Sprintf(`{"language":"bash","code":"sleep %s","timeout_seconds":300}`, m))
		waitAlive(t, m)
		if err := dead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-dead.done
		waitGone(t, m) // its run does not outlive it

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a hang only
		defer cancel()
		for _, tc := range []struct {
			name string
			err  func() error
			what string
		}{
			{"a call in the MCP session of the killed replica", func() error {
				_, err := legacy.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "bash", "code": "echo hi"}})
				return err
			}, "session"},
			{"a call in a codeexec session of the killed replica", func() error {
				_, err := modern.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": "print(1)", "session_id": sessionID}})
				return err
			}, "session"},
			{"tasks/get of the killed replica's task", func() error {
				live := &taskClient{t: t, url: rs.lb.baseURL + "/mcp", version: "2026-07-28"}
				_, rerr, _ := live.post("tasks/get", fmt.Sprintf(`{"taskId":%q}`, taskID))
				if rerr == nil {
					return nil
				}
				return fmt.Errorf("%v", rerr["message"])
			}, "task"},
		} {
			want := "the " + tc.what + " ended because its server (replica " + victim + ") stopped"
			if err := tc.err(); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error saying %q", tc.name, err, want)
			}
		}

		fresh := dial(t, rs.lb, connectOpts{protocolVersion: "2025-11-25"})
		if owner(fresh.ID()) == victim {
			t.Errorf("a new MCP session %q went to the killed replica", fresh.ID())
		}
		for _, cs := range []*mcp.ClientSession{fresh, modern} {
			for range 3 {
				res, out := execute(t, cs, map[string]any{"language": "bash", "code": "echo still here"})
				if res.IsError || out.Stdout != "still here\n" {
					t.Fatalf("after the kill: isError=%v stdout=%q stderr=%q", res.IsError, out.Stdout, out.Stderr)
				}
			}
		}
	})
}

const consoleToken = "e2e-console-token-0123456789abcdef"

// approvalsCLI runs `codeexec approvals ARGS` against the console of a
// replica; it returns stdout, stderr and the error.
func approvalsCLI(t *testing.T, addr string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"approvals"}, args...)...)
	cmd.Env = []string{"CODE_EXEC_ADMIN_ADDR=" + addr, "CODE_EXEC_ADMIN_TOKEN=" + consoleToken, "PATH=" + os.Getenv("PATH")}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestReplicasApprovals: behind HAProxy, a run that waits for approval on
// one replica is listed by every replica's console and CLI, approved
// through another replica's, and proceeds; a replica that is down is said
// in the list, not hidden.
func TestReplicasApprovals(t *testing.T) {
	t.Parallel()
	rs := startReplicas(t, 2, map[string]string{
		"CODE_EXEC_APPROVAL":         "always",
		"CODE_EXEC_APPROVAL_ELICIT":  "false",
		"CODE_EXEC_ADMIN_ADDR":       "{admin}",
		"CODE_EXEC_ADMIN_TOKEN":      consoleToken,
		"CODE_EXEC_APPROVAL_KEY":     "e2e-approval-key-0123456789abcdef0123",
		"CODE_EXEC_APPROVAL_TIMEOUT": "5m",
	})
	cs := dial(t, rs.lb, connectOpts{})
	answer := callAsync(cs, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "bash", "code": "echo approved on another replica"}})

	// Whichever replica asks, each console lists the request.
	var id string
	for _, r := range rs.ids {
		console := &approvalServer{console: "http://" + rs.admin[r] + "/", token: consoleToken}
		id = console.waitPending(t, 1)[0]
	}
	asker := owner(id)
	if rs.servers[asker] == nil {
		t.Fatalf("approval request id %q names no replica", id)
	}
	other := rs.other(asker)
	out, errOut, err := approvalsCLI(t, rs.admin[other], "list")
	if err != nil || !strings.Contains(out, id) {
		t.Fatalf("codeexec approvals list on %s's console: %v\n%s%s", other, err, out, errOut)
	}
	out, errOut, err = approvalsCLI(t, rs.admin[other], "approve", id, "--by", "e2e")
	if err != nil {
		t.Fatalf("codeexec approvals approve %s on %s's console: %v\n%s%s", id, other, err, out, errOut)
	}
	a := <-answer
	wantRan(t, a.res, a.err, "approved on another replica\n")

	// A replica down is said, and the others' requests are still listed.
	dead := rs.servers[asker]
	if err := dead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dead.done
	out, errOut, err = approvalsCLI(t, rs.admin[other], "list")
	if err != nil || !strings.Contains(errOut, "the requests of replica "+asker+" are not listed") || !strings.Contains(out, "No run is waiting") {
		t.Errorf("codeexec approvals list with %s down: %v\nstdout %q\nstderr %q", asker, err, out, errOut)
	}
}

// TestReplicasDrain: a replica that gets SIGTERM drains: /readyz turns 503
// at once, new sessions and runs are refused there and go to the other
// replica through the load balancer, a request of an existing session is
// still served, and the run in flight finishes before the replica exits 0.
// Mode none, so that the run waits for a file the test makes.
func TestReplicasDrain(t *testing.T) {
	t.Parallel()
	rs := startReplicas(t, 2, map[string]string{"CODE_EXEC_SANDBOX": "none", "CODE_EXEC_DRAIN_TIMEOUT": "5m", "CODE_EXEC_MAX_TIMEOUT": "5m"})
	target := rs.servers["r1"]
	dir := t.TempDir()
	started, proceed := filepath.Join(dir, "started"), filepath.Join(dir, "proceed")
	legacy := dial(t, target, connectOpts{protocolVersion: "2025-11-25"})
	inFlight := callAsync(legacy, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "bash",
		"code": fmt.Sprintf("touch %s; while [ ! -e %s ]; do sleep 0.05; done; echo finished after the drain began", started, proceed), "timeout_seconds": 300}})
	waitFor(t, eventWait, "the run to start", func() bool { _, err := os.Stat(started); return err == nil })

	if err := target.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, eventWait, "r1's /readyz to answer 503", func() bool {
		resp, err := http.Get("http://" + rs.metrics["r1"] + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	if _, err := dialErr(t, target, connectOpts{protocolVersion: "2025-11-25"}); err == nil || !strings.Contains(err.Error(), "Service Unavailable") {
		t.Errorf("a new MCP session on the draining replica: %v, want it refused with 503", err)
	}
	modern := &taskClient{t: t, url: target.baseURL + "/mcp", version: "2026-07-28"}
	resp, err := http.DefaultClient.Do(modern.request("tools/call", `{"name":"code_execute","arguments":{"language":"bash","code":"echo new"}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "this server is shutting down") {
		t.Errorf("a new run on the draining replica: %s %s, want 503 saying the server is shutting down", resp.Status, body)
	}
	res, out := execute(t, legacy, map[string]any{"language": "bash", "code": "echo existing session"})
	if res.IsError || out.Stdout != "existing session\n" {
		t.Errorf("a call in an existing session while draining: isError=%v stdout=%q", res.IsError, out.Stdout)
	}

	if !rs.lb.waitLog("be/r1 is DOWN", eventWait) {
		t.Fatalf("haproxy never took r1 out:\n%s", rs.lb.stderr.String())
	}
	elsewhere := dial(t, rs.lb, connectOpts{protocolVersion: "2025-11-25"})
	if owner(elsewhere.ID()) != "r2" {
		t.Errorf("a new session through the load balancer went to %q, want r2", elsewhere.ID())
	}
	res, out = execute(t, elsewhere, map[string]any{"language": "bash", "code": "echo elsewhere"})
	if res.IsError || out.Stdout != "elsewhere\n" {
		t.Errorf("a run through the load balancer while r1 drains: isError=%v stdout=%q", res.IsError, out.Stdout)
	}

	if err := os.WriteFile(proceed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := <-inFlight
	wantRan(t, a.res, a.err, "finished after the drain began\n")
	if code := target.waitExit(t, eventWait); code != 0 {
		t.Errorf("exit code %d after the drain, want 0", code)
	}
}
