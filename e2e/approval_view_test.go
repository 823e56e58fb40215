package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What an approver sees is what runs: these cases drive the real binary
// with the MCP Go SDK client, and the console in headless Chromium.

// waitAsked waits until the call ch is pending on the console and returns
// its id; it fails the test if the call ends first (it ran, or was refused,
// without asking anyone).
func (a *approvalServer) waitAsked(t *testing.T, ch chan *toolAnswer) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case ans := <-ch:
			if ans.err != nil {
				t.Fatalf("the call ended without waiting for approval: %v", ans.err)
			}
			t.Fatalf("the call ended without waiting for approval: isError %v, %q", ans.res.IsError, text(ans.res))
		default:
		}
		if ids, err := a.pendingIDs(t); err == nil && len(ids) == 1 {
			return ids[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never became pending")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestApprovalRiskyChecksFiles: under CODE_EXEC_APPROVAL=risky, harmless
// code that runs a file of the request waits for a person when the file
// is risky, and the console's API and `codeexec approvals list` show the
// file's text.
func TestApprovalRiskyChecksFiles(t *testing.T) {
	t.Parallel()
	a := approvalConnect(t, approvalOpts{env: map[string]string{"CODE_EXEC_APPROVAL": "risky"}})
	script := "rm -f ./nothing-here\necho removed\n"
	ch := callAsync(a.cs, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
		"language": "bash", "code": "bash run.sh",
		"files": []map[string]any{{"path": "run.sh", "content": script}},
	}})
	id := a.waitAsked(t, ch)
	asks, err := a.pending(t)
	if err != nil || len(asks) != 1 || len(asks[0].Files) != 1 || asks[0].Files[0].Text != script || !strings.Contains(strings.Join(asks[0].Reasons, "\n"), `in the file "run.sh": deletes or overwrites files: runs "rm" (line 1)`) {
		t.Fatalf("the console's API does not show the file and why it is risky: %+v (err %v)", asks, err)
	}
	out, err := a.cli(t, "list")
	if err != nil || !strings.Contains(out, "run.sh") || !strings.Contains(out, "rm -f ./nothing-here") {
		t.Fatalf("approvals list does not show the file's text: %v\n%s", err, out)
	}
	if out, err := a.cli(t, "deny", id); err != nil {
		t.Fatalf("approvals deny: %v\n%s", err, out)
	}
	ans := <-ch
	wantDenied(t, ans.res, ans.err, "denied")
}

// rawHidden matches, in the browser, the characters that must never reach
// the approver's eyes raw (a sample of each kind that the console escapes).
const rawHidden = `/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00a0\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\u3164]|\u{E0041}|\uFE0F/u`

// TestApprovalConsoleShowsEveryCharacter: the console shows every character
// that will run, and every file: bidirectional controls, invisible and
// control characters are escaped and highlighted in the code, the file
// names and texts, stdin and the client's name, the risk check flags them,
// and code wraps inside its card (a long run of spaces cannot push code
// out of sight, behind a scroll bar or beyond the card).
func TestApprovalConsoleShowsEveryCharacter(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	a := approvalConnect(t, approvalOpts{clientName: "evil\x1b[2K\ralice's laptop (verified)\u202e"})
	code := "access_level = \"user\"\n" +
		"if access_level != \"none\u202E \u2066# Check if admin\u2069 \u2066\" and access_level != \"user\":\n" +
		"    print(\"admin\")\n" +
		"print(\"report\")" + strings.Repeat(" ", 400) + ";__import__(\"os\").system(\"id\")\n" +
		"x = 1" + strings.Repeat("\t", 60) + "# tabs in the middle of a line\n" +
		"token = \"" + strings.Repeat("A", 3000) + "\"\n" +
		"hidden = \"a\u200bb\u00adc\U000E0041\u3164\u00a0\u2028\uFE0F\x1b[2J\"\n"
	lib := "import os\nos.system(\"id\")" + strings.Repeat(" ", 300) + "# pushed away\n"
	ch := callAsync(a.cs, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{
		"language": "python", "code": code, "stdin": "yes\u202e\n",
		"files": []map[string]any{
			// Bidirectional controls in a path are refused before any
			// approval (artifacts.CleanPath); invisible characters that a
			// path may hold are shown escaped.
			{"path": "invoice.pdf\u200b\u00ad.py", "content": "print('invoice')\n"},
			{"path": "lib.py", "content": lib},
		},
	}})
	id := a.waitAsked(t, ch)

	var card string
	err := chromedp.Run(ctx,
		chromedp.Navigate(logField(a.srv.stderr.String(), "approvals console", "login_url")),
		chromedp.WaitVisible(`li.ask button.approve`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("li.ask").textContent`, &card),
	)
	if err != nil {
		t.Fatalf("loading the console: %v", err)
	}
	var raw bool
	if err := chromedp.Run(ctx, chromedp.Evaluate(rawHidden+`.test(document.querySelector("li.ask").textContent)`, &raw)); err != nil {
		t.Fatal(err)
	}
	if raw {
		t.Errorf("the console shows hidden or control characters raw:\n%q", card)
	}
	for _, w := range []string{
		"U+202E", "U+2066", "U+2069", "U+200B", "U+00AD", "U+E0041", "U+3164", "U+00A0", "U+2028", "U+FE0F", "U+001B", "U+000D", // escapes
		"alice's laptop (verified)",                                   // the client's name, escaped
		"invoice.pdf⟨U+200B⟩⟨U+00AD⟩.py", "lib.py", `os.system("id")`, // every file, with its text
		"yes",                            // stdin
		"hides or disguises text",        // the risk check's reason
		`;__import__("os").system("id")`, // the code after the spaces
	} {
		if !strings.Contains(card, w) {
			t.Errorf("the console's card does not show %q", w)
		}
	}
	// The escapes are marked as such, not mere text.
	var marked int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll("li.ask .hidden-char").length`, &marked)); err != nil {
		t.Fatal(err)
	}
	if marked < 12 {
		t.Errorf("only %d escaped characters are highlighted", marked)
	}

	// Every piece of text lies inside the card and the window, and no
	// element of the card scrolls or clips: what the approver can see is
	// all there is.
	var clipped []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`(() => {
		const card = document.querySelector("li.ask");
		const box = card.getBoundingClientRect();
		const out = [];
		const walk = document.createTreeWalker(card, NodeFilter.SHOW_TEXT);
		for (let n = walk.nextNode(); n; n = walk.nextNode()) {
			if (!n.textContent.trim()) continue;
			const r = document.createRange();
			r.selectNodeContents(n);
			for (const rect of r.getClientRects()) {
				if (rect.left < box.left - 0.5 || rect.right > box.right + 0.5 || rect.right > window.innerWidth || rect.top < box.top - 0.5 || rect.bottom > box.bottom + 0.5) {
					out.push("text " + JSON.stringify(n.textContent.slice(0, 40)) + " at " + Math.round(rect.left) + ".." + Math.round(rect.right) + " outside the card " + Math.round(box.left) + ".." + Math.round(box.right));
					break;
				}
			}
		}
		for (const e of card.querySelectorAll("*")) {
			if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== "visible") out.push(e.tagName + "." + e.className + " scrolls sideways: " + e.scrollWidth + " > " + e.clientWidth);
			if (e.scrollHeight > e.clientHeight + 1 && getComputedStyle(e).overflowY !== "visible") out.push(e.tagName + "." + e.className + " scrolls down: " + e.scrollHeight + " > " + e.clientHeight);
		}
		return out;
	})()`, &clipped)); err != nil {
		t.Fatal(err)
	}
	if len(clipped) > 0 {
		t.Errorf("the approver cannot see everything:\n%s", strings.Join(clipped, "\n"))
	}
	if out, err := a.cli(t, "deny", id); err != nil {
		t.Fatalf("approvals deny: %v\n%s", err, out)
	}
	ans := <-ch
	wantDenied(t, ans.res, ans.err, "denied")
}

// TestApprovalConsoleKeepsCardsInPlace: a request that is withdrawn, or
// that the approver just decided, keeps its place until the approver
// dismisses it, so a click aimed at one request's Approve button never
// lands on another's.
func TestApprovalConsoleKeepsCardsInPlace(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	a := approvalConnect(t, approvalOpts{transport: http_})
	type call struct {
		ch     chan *toolAnswer
		cancel context.CancelFunc
	}
	start := func(code string) call {
		cctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		ch := make(chan *toolAnswer, 1)
		go func() {
			res, err := a.cs.CallTool(cctx, &mcp.CallToolParams{Name: "code_execute", Arguments: map[string]any{"language": "python", "code": code}})
			ch <- &toolAnswer{res, err}
		}()
		return call{ch, cancel}
	}
	first := start("print('first')")
	a.waitPending(t, 1)
	second := start("print('second')")
	a.waitPending(t, 2)
	third := start("print('third')")
	ids := a.waitPending(t, 3)

	if err := chromedp.Run(ctx,
		chromedp.Navigate(logField(a.srv.stderr.String(), "approvals console", "login_url")),
		chromedp.WaitVisible(`li.ask[data-id="`+ids[2]+`"] button.approve`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("loading the console: %v", err)
	}
	// approveAt is the middle of id's Approve button, in the window.
	approveAt := func(id string) (x, y float64) {
		t.Helper()
		var at []float64
		if err := chromedp.Run(ctx, chromedp.Evaluate(`(() => {
			const b = document.querySelector('li.ask[data-id="`+id+`"] button.approve');
			b.scrollIntoView({block: "center"});
			const r = b.getBoundingClientRect();
			return [r.left + r.width / 2, r.top + r.height / 2];
		})()`, &at)); err != nil {
			t.Fatal(err)
		}
		return at[0], at[1]
	}
	// clickAt clicks at x, y and returns how many answers the page sent,
	// once they are answered.
	clickAt := func(x, y float64) int {
		t.Helper()
		var posts int
		err := chromedp.Run(ctx,
			chromedp.Evaluate(`(() => {
				window.__posts = [];
				if (!window.__fetch) {
					window.__fetch = window.fetch;
					window.fetch = (url, opts) => {
						const p = window.__fetch(url, opts);
						if (opts && opts.method === "POST") window.__posts.push(p.catch(() => null));
						return p;
					};
				}
			})()`, nil),
			chromedp.MouseClickXY(x, y),
			chromedp.Evaluate(`window.__settled = false; Promise.all(window.__posts).then(() => { window.__settled = true; }); 0`, nil),
			chromedp.Poll(`window.__settled`, nil, chromedp.WithPollingTimeout(30*time.Second)),
			chromedp.Evaluate(`window.__posts.length`, &posts),
		)
		if err != nil {
			t.Fatal(err)
		}
		return posts
	}

	// The pointer rests on the first request's Approve button when its
	// client withdraws it; the click that follows approves nothing.
	x, y := approveAt(ids[0])
	if err := chromedp.Run(ctx, chromedp.MouseEvent("mouseMoved", x, y)); err != nil {
		t.Fatal(err)
	}
	first.cancel()
	<-first.ch
	if err := chromedp.Run(ctx, chromedp.Poll(`!document.querySelector('li.ask[data-id="`+ids[0]+`"] button.approve') && !!document.querySelector('li.ask[data-id="`+ids[1]+`"] button.approve')`, nil, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the console never showed the withdrawal: %v", err)
	}
	if n := clickAt(x, y); n != 0 {
		t.Errorf("a click where the withdrawn request's Approve button was sent %d answers", n)
	}
	if left, err := a.pendingIDs(t); err != nil || fmt.Sprint(left) != fmt.Sprint(ids[1:]) {
		t.Fatalf("after a click on the withdrawn request's place, pending = %v (err %v), want %v: another request was answered", left, err, ids[1:])
	}
	var notice string
	if err := chromedp.Run(ctx, chromedp.Poll(`(() => { const li = document.querySelector('li.ask[data-id="`+ids[0]+`"]'); return !!li && /withdrawn/i.test(li.textContent); })()`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text(`li.ask[data-id="`+ids[0]+`"] .notice`, &notice, chromedp.ByQuery)); err != nil {
		t.Fatalf("the withdrawn request's card does not say it was withdrawn: %v", err)
	}

	// The approver approves the second; a second click at the same place
	// approves nothing else.
	x, y = approveAt(ids[1])
	if n := clickAt(x, y); n != 1 {
		t.Fatalf("clicking Approve sent %d answers, want 1", n)
	}
	ans := <-second.ch
	wantRan(t, ans.res, ans.err, "second\n")
	if n := clickAt(x, y); n != 0 {
		t.Errorf("a second click on the approved request's place sent %d answers", n)
	}
	if left, err := a.pendingIDs(t); err != nil || fmt.Sprint(left) != fmt.Sprint(ids[2:]) {
		t.Fatalf("after a second click, pending = %v (err %v), want %v", left, err, ids[2:])
	}

	// Dismissing the decided cards moves the third up; it is still pending.
	if err := chromedp.Run(ctx,
		chromedp.Click(`li.ask[data-id="`+ids[0]+`"] button.dismiss`, chromedp.ByQuery),
		chromedp.Click(`li.ask[data-id="`+ids[1]+`"] button.dismiss`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`li.ask[data-id="`+ids[0]+`"]`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`li.ask[data-id="`+ids[1]+`"]`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("dismissing the decided cards: %v", err)
	}
	if out, err := a.cli(t, "deny", ids[2]); err != nil {
		t.Fatalf("approvals deny: %v\n%s", err, out)
	}
	ans = <-third.ch
	wantDenied(t, ans.res, ans.err, "denied")
}
