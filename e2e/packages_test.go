package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/packages/packagestest"
)

// TestPackages drives CODE_EXEC_PACKAGES=true through the real binary with
// the official MCP client, in process and docker mode, against a package
// index this test serves on this machine (loopback, or the Docker bridge's
// own address for docker mode): the packages install and import, the
// second call comes from the cache (at least 5× faster), the run cannot
// reach the index, a malicious spec is refused, a failing install says why,
// a session gets its packages, and sandbox_info reports the cache.
func TestPackages(t *testing.T) {
	eachPackagesMode(t, checkPackages)
}

// eachPackagesMode runs check in process and docker mode, in parallel, with
// the address that a test index should listen on in that mode: loopback,
// or the Docker bridge's own address for docker mode (which a container on
// a bridge network could reach directly, and a run container must not).
func eachPackagesMode(t *testing.T, check func(t *testing.T, mode, ip string)) {
	t.Parallel()
	packagestest.RequireInstallers(t)
	for _, mode := range []string{"process", "docker"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ip := listenAddrFor(t, mode)
			check(t, mode, ip)
		})
	}
}

func checkPackages(t *testing.T, mode, ip string) {
	ix := packagestest.Serve(t, net.JoinHostPort(ip, "0"), packagestest.Python, packagestest.JavaScript)
	wd := workDir(t)
	cacheDir := filepath.Join(wd, "packages")
	env := serverEnv(t, map[string]string{
		"CODE_EXEC_WORK_DIR":           wd,
		"CODE_EXEC_SANDBOX":            mode,
		"CODE_EXEC_PACKAGES":           "true",
		"CODE_EXEC_PIP_INDEX_URL":      ix.PipURL,
		"CODE_EXEC_NPM_REGISTRY":       ix.NpmURL,
		"CODE_EXEC_PACKAGES_CACHE_DIR": cacheDir,
		"CODE_EXEC_TIMEOUT":            "30s",
		"CODE_EXEC_LANGUAGES":          "python,javascript",
		"CODE_EXEC_DOCKER_POOL_SIZE":   "2",
	})
	if mode == "process" && os.Getenv("CODE_EXEC_TEST_NO_USERNS") == "1" && os.Geteuid() != 0 {
		// Without user namespaces an ordinary user's runs have no network
		// namespace, so nothing could hold the install phase to the index:
		// the server must refuse to start, saying why.
		cmd := exec.Command(binPath)
		cmd.Env = envList(env)
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "the install phase of CODE_EXEC_PACKAGES=true cannot start") {
			t.Fatalf("without a network namespace the server started or did not say why: %v\n%s", err, out)
		}
		return
	}
	cs, srv := connect(t, stdio, env, connectOpts{})
	if !srv.waitLog("CODE_EXEC_PACKAGES=true", eventWait) {
		t.Errorf("the server did not say loudly that packages are on:\n%s", srv.logTail())
	}

	args := map[string]any{"language": "python", "code": "import codeexec_demo\nprint(codeexec_demo.VALUE)", "packages": []any{"codeexec-demo==1.0"}}
	res, out := execute(t, cs, args)
	if res.IsError || strings.TrimSpace(out.Stdout) != "42" {
		t.Fatalf("first call: isError=%v %q", res.IsError, text(res))
	}
	if p := out.Packages; p == nil || p.Cached || len(p.List) != 1 || p.List[0] != "codeexec-demo==1.0" {
		t.Errorf("the first call's packages report %+v, want codeexec-demo==1.0 installed for it", p)
	}
	downloads := ix.Downloads.Load()
	// The second call comes from the cache: what the result says, and the
	// index serves nothing. (How much faster it is, is measured by the
	// benchmark in docs/performance.md, not asserted by a test.)
	res, out = execute(t, cs, args)
	if res.IsError || strings.TrimSpace(out.Stdout) != "42" {
		t.Fatalf("the second call: isError=%v %q", res.IsError, text(res))
	}
	if p := out.Packages; p == nil || !p.Cached {
		t.Errorf("the second call's packages report %+v, want it from the cache", p)
	}
	if !strings.Contains(text(res), "Packages: codeexec-demo==1.0 (from the cache).") {
		t.Errorf("the second call's text does not say the packages came from the cache:\n%s", text(res))
	}
	if ix.Downloads.Load() != downloads {
		t.Error("the second call downloaded the package again")
	}

	res, out = execute(t, cs, map[string]any{"language": "javascript", "code": "console.log(require('codeexec-demo').value)", "packages": []any{"codeexec-demo@1.0.0"}})
	if res.IsError || strings.TrimSpace(out.Stdout) != "42" {
		t.Fatalf("javascript: isError=%v %q", res.IsError, text(res))
	}

	before := ix.Requests.Load()
	port := ix.Addr[strings.LastIndex(ix.Addr, ":")+1:]
	res, out = execute(t, cs, map[string]any{"language": "python", "packages": []any{"codeexec-demo==1.0"},
		"code": "import socket\ntry:\n    socket.create_connection(('" + ip + "', " + port + "), timeout=2)\n    print('REACHED')\nexcept OSError as e:\n    print('BLOCKED', e)\n"})
	if res.IsError || !strings.HasPrefix(out.Stdout, "BLOCKED") || ix.Requests.Load() != before {
		t.Fatalf("the run reached the index: %q", text(res))
	}

	for _, bad := range []string{"--index-url=http://evil.example/simple", "pkg @ https://evil.example/pkg.whl", "../../etc/passwd"} {
		res := call(t, cs, "code_execute", map[string]any{"language": "python", "code": "print(1)", "packages": []any{bad}})
		if !res.IsError || !strings.Contains(text(res), "is refused") || !strings.Contains(text(res), bad) {
			t.Errorf("malicious spec %q: isError=%v %q", bad, res.IsError, text(res))
		}
	}
	res = call(t, cs, "code_execute", map[string]any{"language": "python", "code": "print(1)", "packages": []any{"codeexec-demo==9.9"}})
	if !res.IsError || !strings.Contains(text(res), "could not be installed") || !strings.Contains(text(res), "No matching distribution found for codeexec-demo==9.9") {
		t.Errorf("failing install: isError=%v %q", res.IsError, text(res))
	}

	res = call(t, cs, "session_create", map[string]any{"language": "python", "packages": []any{"codeexec-extra==2.0"}})
	var sess struct {
		SessionID string   `json:"session_id"`
		Packages  []string `json:"packages"`
	}
	remarshal(t, res.StructuredContent, &sess)
	if res.IsError || sess.SessionID == "" || strings.Join(sess.Packages, ",") != "codeexec-extra==2.0" {
		t.Fatalf("session_create with packages: %q", text(res))
	}
	res, out = execute(t, cs, map[string]any{"language": "python", "session_id": sess.SessionID, "code": "import codeexec_extra\nprint(codeexec_extra.NAME)"})
	if res.IsError || strings.TrimSpace(out.Stdout) != "extra" {
		t.Fatalf("a call in the session: %q", text(res))
	}
	res = call(t, cs, "code_execute", map[string]any{"language": "python", "session_id": sess.SessionID, "code": "print(1)", "packages": []any{"codeexec-demo==1.0"}})
	if !res.IsError || !strings.Contains(text(res), "session_create's packages argument") {
		t.Errorf("packages with session_id: %q", text(res))
	}

	res = call(t, cs, "sandbox_info", map[string]any{})
	var info struct {
		Packages struct {
			Enabled      bool     `json:"enabled"`
			PipIndexURL  string   `json:"pip_index_url"`
			InstallAllow []string `json:"install_allow"`
			Cache        struct {
				Entries  int   `json:"entries"`
				Bytes    int64 `json:"bytes"`
				MaxBytes int64 `json:"max_bytes"`
			} `json:"cache"`
		} `json:"packages"`
	}
	remarshal(t, res.StructuredContent, &info)
	p := info.Packages
	if !p.Enabled || p.PipIndexURL != ix.PipURL || strings.Join(p.InstallAllow, ",") != ix.Addr || p.Cache.Entries != 3 || p.Cache.Bytes == 0 || p.Cache.MaxBytes != 2<<30 {
		t.Errorf("sandbox_info packages: %+v", p)
	}
	entries, _ := os.ReadDir(cacheDir)
	if len(entries) != 3 {
		t.Errorf("cache folder holds %d entries, want 3", len(entries))
	}
}

// TestPackagesOffByDefault: without CODE_EXEC_PACKAGES a call with packages
// is refused with a clear error and the server keeps serving.
func TestPackagesOffByDefault(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, map[string]string{"CODE_EXEC_LANGUAGES": "python"}), connectOpts{})
	res := call(t, cs, "code_execute", map[string]any{"language": "python", "code": "print(1)", "packages": []any{"requests==2.31.0"}})
	if !res.IsError || !strings.Contains(text(res), "CODE_EXEC_PACKAGES=false") {
		t.Fatalf("packages while off: isError=%v %q", res.IsError, text(res))
	}
	checkExample(t, cs, "process")
}

// TestPackagesSessionApproval: creating a session with packages is a
// request like a run's. With CODE_EXEC_APPROVAL=always it waits for a
// person, who sees the language and the packages, before anything is
// installed; denied, no session starts; approved, the session starts with
// no file of its packages run first (the package holds a sitecustomize
// that rewrites every program to print HIJACKED, as one did in an attack:
// the approved print('hello world') prints hello world), and the audit log
// records the request, the decision and the creation.
func TestPackagesSessionApproval(t *testing.T) {
	eachPackagesMode(t, func(t *testing.T, mode, ip string) {
		if mode == "process" && os.Getenv("CODE_EXEC_TEST_NO_USERNS") == "1" && os.Geteuid() != 0 {
			t.Skip("without user namespaces process mode's install phase cannot start (TestPackages checks that the server says so)")
		}
		ix := packagestest.Serve(t, net.JoinHostPort(ip, "0"), []packagestest.Package{packagestest.Hooks}, nil)
		wd := workDir(t)
		a := approvalConnect(t, approvalOpts{env: map[string]string{
			"CODE_EXEC_WORK_DIR":           wd,
			"CODE_EXEC_SANDBOX":            mode,
			"CODE_EXEC_PACKAGES":           "true",
			"CODE_EXEC_PIP_INDEX_URL":      ix.PipURL,
			"CODE_EXEC_PACKAGES_CACHE_DIR": filepath.Join(wd, "packages"),
			"CODE_EXEC_LANGUAGES":          "python",
			"CODE_EXEC_DOCKER_POOL_SIZE":   "0",
		}})
		spec := packagestest.Hooks.Name + "==" + packagestest.Hooks.Version
		create := &mcp.CallToolParams{Name: "session_create", Arguments: map[string]any{"language": "python", "packages": []any{spec}}}

		// Denied: nothing is installed, no session starts.
		ch := callAsync(a.cs, create)
		ids := a.waitPending(t, 1)
		resp, err := a.api(t, http.MethodGet, "api/pending")
		if err != nil {
			t.Fatal(err)
		}
		var pending struct {
			Pending []struct {
				Action   string   `json:"action"`
				Language string   `json:"language"`
				Packages []string `json:"packages"`
			} `json:"pending"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&pending)
		resp.Body.Close()
		if p := pending.Pending; len(p) != 1 || p[0].Action != "session_create" || p[0].Language != "python" || strings.Join(p[0].Packages, ",") != spec {
			t.Errorf("the approver is shown %+v, want the creation of a python session with %s", p, spec)
		}
		if n := ix.Downloads.Load(); n != 0 {
			t.Errorf("%d packages were downloaded before anyone approved the session", n)
		}
		if out, err := a.cli(t, "deny", "--by", "erin", "--note", "not these", ids[0]); err != nil {
			t.Fatalf("approvals deny: %v\n%s", err, out)
		}
		ans := <-ch
		if ans.err != nil || !ans.res.IsError || !strings.HasPrefix(text(ans.res), "The session was not created: erin") || !strings.Contains(text(ans.res), "not these") {
			t.Fatalf("a denied session_create: %v %q", ans.err, text(ans.res))
		}
		if n := ix.Downloads.Load(); n != 0 {
			t.Errorf("a denied session_create downloaded %d packages", n)
		}

		// Approved: the session starts, and its first call is what
		// was approved.
		ch = callAsync(a.cs, create)
		ids = a.waitPending(t, 1)
		if out, err := a.cli(t, "approve", "--by", "dana", ids[0]); err != nil {
			t.Fatalf("approvals approve: %v\n%s", err, out)
		}
		ans = <-ch
		if ans.err != nil || ans.res.IsError {
			t.Fatalf("an approved session_create: %v %q", ans.err, text(ans.res))
		}
		var sess struct {
			SessionID string `json:"session_id"`
		}
		remarshal(t, ans.res.StructuredContent, &sess)
		ch = callAsync(a.cs, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "session_id": sess.SessionID, "code": "print('hello world')"}})
		ids = a.waitPending(t, 1)
		if out, err := a.cli(t, "approve", "--by", "dana", ids[0]); err != nil {
			t.Fatalf("approvals approve: %v\n%s", err, out)
		}
		ans = <-ch
		wantRan(t, ans.res, ans.err, "hello world\n")

		var created []string
		for _, line := range strings.Split(strings.TrimSpace(a.auditLog(t)), "\n") {
			var e struct {
				Event    string   `json:"event"`
				Action   string   `json:"action"`
				Packages []string `json:"packages"`
				Outcome  string   `json:"outcome"`
				ExitCode *int     `json:"exit_code"`
			}
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("audit line %q: %v", line, err)
			}
			switch {
			case e.Event == "request" && e.Action == "session_create" && strings.Join(e.Packages, ",") == spec:
				created = append(created, "request")
			case e.Event == "decision" && e.Outcome != "":
				created = append(created, e.Outcome)
			case e.Event == "run" && e.ExitCode != nil && *e.ExitCode == 0:
				created = append(created, "run")
			}
		}
		if got := strings.Join(created, ","); got != "request,denied,request,approved,run,approved,run" {
			t.Errorf("audit log: %s, want the denied creation, the approved one and its call, each recorded", got)
		}
	})
}
