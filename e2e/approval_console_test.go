package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

const chromiumPath = "/usr/bin/chromium"

// browser starts headless Chromium (Debian's package) for chromedp, with
// extra options if any, or skips the test when it is missing, unless
// CODE_EXEC_REQUIRE_BROWSER=1; it skips under -short.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	sandboxtest.SkipShort(t, sandboxtest.NeedsBrowser)
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CODE_EXEC_REQUIRE_BROWSER") == "1" {
			t.Fatalf("%s is missing and CODE_EXEC_REQUIRE_BROWSER=1: install it with apt-get install -y chromium", chromiumPath)
		}
		t.Skipf("skipping this browser test: %s is missing (apt-get install -y chromium; set CODE_EXEC_REQUIRE_BROWSER=1 to make this a failure)", chromiumPath)
	}
	// Chromium may still write to its profile for a moment after it is
	// told to quit, so the profile is removed with retries, not t.TempDir:
	// until it is gone, for as long as eventWait, which only bounds a
	// chromium that never stops.
	profile, err := os.MkdirTemp("", "codeexec-e2e-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		waitFor(t, eventWait, "the removal of the chromium profile "+profile, func() bool {
			err = os.RemoveAll(profile)
			return err == nil
		}, func() string { return err.Error() })
	})
	// Chromium's own temporary files (its singleton socket's folder, and
	// with disable-dev-shm-usage its shared memory) go in the profile too:
	// in /tmp a chromium that is killed, not closed, leaves them there.
	tmp := filepath.Join(profile, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(profile),
		chromedp.Env("TMPDIR=" + tmp),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1100, 900),
	}
	opts = append(opts, extra...)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// TestApprovalConsoleBrowser: the console in headless Chromium lists a
// pending run with its code, reasons and requester, shows attacker-
// controlled code as text, and approves and denies with one click.
func TestApprovalConsoleBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	a := approvalConnect(t, approvalOpts{})
	args := func(code string) *mcp.CallToolParams {
		return &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": code}}
	}

	// A realistic request, approved with one click (and photographed for docs/approvals.md).
	code := "import os, urllib.request\n\ntoken = os.environ.get(\"GITHUB_TOKEN\", \"\")\nreq = urllib.request.Request(\"https://api.github.com/user\", headers={\"Authorization\": \"token \" + token})\nprint(\"console approved\")\n"
	ch := callAsync(a.cs, args(code))
	a.waitPending(t, 1)
	var shown string
	err := chromedp.Run(ctx,
		// The login URL that the server logs carries the token in its fragment.
		chromedp.Navigate(logField(a.srv.stderr.String(), "approvals console", "login_url")),
		chromedp.WaitVisible(`li.ask button.approve`, chromedp.ByQuery),
		chromedp.SendKeys(`#who`, "e2e-browser", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("li.ask code").textContent`, &shown),
	)
	if err != nil {
		t.Fatalf("loading the console: %v", err)
	}
	if strings.TrimSpace(shown) != strings.TrimSpace(code) {
		t.Fatalf("the console shows %q, want the code %q", shown, code)
	}
	var page string
	_ = chromedp.Run(ctx, chromedp.Text(`li.ask`, &page, chromedp.ByQuery))
	for _, w := range []string{"codeexec-e2e-approvals 1.0.0", "network access", "reads environment variables or credentials"} {
		if !strings.Contains(page, w) {
			t.Errorf("the console entry does not show %q:\n%s", w, page)
		}
	}
	if os.Getenv("CODE_EXEC_UPDATE_SCREENSHOT") == "1" {
		var png []byte
		if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
			t.Fatal(err)
		}
		root, _ := moduleRoot()
		if err := os.WriteFile(filepath.Join(root, "docs", "images", "console.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The card stays, saying what was decided, until it is dismissed.
	if err := chromedp.Run(ctx,
		chromedp.Click(`li.ask button.approve`, chromedp.ByQuery),
		chromedp.WaitVisible(`li.ask button.dismiss`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("clicking Approve: %v", err)
	}
	var notice string
	if err := chromedp.Run(ctx,
		chromedp.Text(`li.ask .notice`, &notice, chromedp.ByQuery),
		chromedp.Click(`li.ask button.dismiss`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`li.ask`, chromedp.ByQuery),
	); err != nil || notice != "Approved by you." {
		t.Fatalf("the approved card said %q, then dismissing it: %v", notice, err)
	}
	ans := <-ch
	if ans.err != nil || ans.res.IsError {
		t.Fatalf("approved run: %v %q", ans.err, text(ans.res))
	}
	// The recent list shows the decision and how the run ended.
	recentShows := func(words ...string) string {
		js := `(() => { const li = document.querySelector("#recent li.done"); return !!li`
		for _, w := range words {
			b, _ := jsonMarshal(w)
			js += ` && li.textContent.includes(` + string(b) + `)`
		}
		return js + `; })()`
	}
	if err := chromedp.Run(ctx, chromedp.Poll(recentShows("approved", "by e2e-browser", "via console", "exit code 0"), nil, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		var shown string
		_ = chromedp.Run(ctx, chromedp.Text(`#history`, &shown, chromedp.ByQuery))
		t.Fatalf("the console's recent list does not show the approved run: %v\n%s", err, shown)
	}

	// Attacker-controlled code is shown as text, never as markup; Deny.
	xss := "print(1) # </code></pre><img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>"
	ch = callAsync(a.cs, args(xss))
	a.waitPending(t, 1)
	var (
		nodes int
		title string
	)
	err = chromedp.Run(ctx,
		chromedp.WaitVisible(`li.ask button.deny`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("li.ask code").textContent`, &shown),
		chromedp.Evaluate(`document.querySelectorAll("li.ask img, li.ask script").length`, &nodes),
		chromedp.Title(&title),
	)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(shown) != xss || nodes != 0 || title == "pwned" {
		t.Fatalf("the console rendered code as markup: shown %q, %d img/script nodes, title %q", shown, nodes, title)
	}
	if err := chromedp.Run(ctx,
		chromedp.Click(`li.ask button.deny`, chromedp.ByQuery),
		chromedp.Click(`li.ask button.dismiss`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`li.ask`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("clicking Deny, then Dismiss: %v", err)
	}
	ans = <-ch
	wantDenied(t, ans.res, ans.err, "e2e-browser", "console")
	if err := chromedp.Run(ctx, chromedp.Poll(recentShows("denied", "by e2e-browser", "did not run"), nil, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("the console's recent list does not show the denial: %v", err)
	}

	log := a.auditLog(t)
	for _, w := range []string{`"outcome":"approved","by":"e2e-browser (console from 127.0.0.1`, `"outcome":"denied","by":"e2e-browser (console from 127.0.0.1`} {
		if !strings.Contains(log, w) {
			t.Errorf("audit log lacks %s:\n%s", w, log)
		}
	}
}
