package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// pageScript is what a web page can do to an MCP server on loopback
// without the server's consent, and what a page of an origin that the
// operator listed does with it. Each function resolves with a report of
// what the page could read; the test starts one with run() and polls
// window.report.
const pageScript = `
const initialize = (version) => JSON.stringify({jsonrpc: "2.0", id: 1, method: "initialize",
  params: {protocolVersion: version, capabilities: {}, clientInfo: {name: "page", version: "1"}}});
const initialized = JSON.stringify({jsonrpc: "2.0", method: "notifications/initialized"});
const call = (id, code) => JSON.stringify({jsonrpc: "2.0", id: id, method: "tools/call",
  params: {name: "code_execute", arguments: {language: "python", code: code}}});

// post sends body the ways a page may: "json" is a CORS request with
// Content-Type application/json (the browser asks the server first); the
// others are no-cors requests with a simple content type, which the
// browser sends without asking (the page cannot read their answers).
async function post(url, body, how, headers) {
  const init = how === "json"
    ? {method: "POST", mode: "cors", headers: Object.assign({"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, headers || {}), body: body}
    : {method: "POST", mode: "no-cors", headers: {"Content-Type": how}, body: body};
  try {
    const r = await fetch(url, init);
    return {how: how, type: r.type, status: r.status, session: r.headers.get("Mcp-Session-Id"), text: r.type === "opaque" ? "" : await r.text()};
  } catch (e) {
    return {how: how, error: String(e)};
  }
}

// openSSE opens an EventSource; it resolves with the message endpoint the
// server announces, or with an error when the browser cannot read the stream.
function openSSE(url) {
  return new Promise((resolve) => {
    const es = new EventSource(url);
    es.addEventListener("endpoint", (e) => resolve({es: es, endpoint: new URL(e.data, url).href}));
    es.onerror = () => { es.close(); resolve({error: "the EventSource failed"}); };
  });
}

// answer resolves with the data of the first message on es with this id.
function answer(es, id) {
  return new Promise((resolve) => es.addEventListener("message", (e) => {
    try { if (JSON.parse(e.data).id === id) { resolve(e.data); } } catch (_) {}
  }));
}

const simple = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"];

// attackSSE: the attack of issue 26 (an EventSource, then no-cors posts of
// initialize and tools/call to the endpoint it announces), and posts of
// every kind to a live session that the page did not open (session).
async function attackSSE(base, session, code) {
  const report = {};
  const o = await openSSE(base + "/sse");
  report.eventSource = o.error || "open";
  if (o.es) {
    const got = answer(o.es, 3);
    report.posts = [await post(o.endpoint, initialize("2024-11-05"), "text/plain"),
      await post(o.endpoint, initialized, "text/plain"),
      await post(o.endpoint, call(3, code), "text/plain")];
    report.output = await got;
    o.es.close();
  }
  report.session = [];
  for (const how of simple.concat(["json"])) {
    report.session.push(await post(session, call(4, code), how));
  }
  return report;
}

// attackHTTP: posts of every kind of initialize and tools/call to /mcp.
async function attackHTTP(base, code) {
  const report = {posts: []};
  for (const how of simple.concat(["json"])) {
    report.posts.push(await post(base + "/mcp", initialize("2025-06-18"), how));
    report.posts.push(await post(base + "/mcp", call(5, code), how));
  }
  return report;
}

// useSSE and useHTTP are what a page of a listed origin does: a client
// of its own, with CORS requests the server lets it read.
async function useSSE(base, code) {
  const o = await openSSE(base + "/sse");
  if (!o.es) { return {error: o.error}; }
  const got = answer(o.es, 3);
  const posts = [await post(o.endpoint, initialize("2024-11-05"), "json"),
    await post(o.endpoint, initialized, "json"),
    await post(o.endpoint, call(3, code), "json")];
  const failed = posts.find((p) => p.error || p.status !== 202);
  if (failed) { o.es.close(); return {posts: posts}; }
  const output = await got;
  o.es.close();
  return {posts: posts, output: output};
}

async function useHTTP(base, code) {
  const init = await post(base + "/mcp", initialize("2025-06-18"), "json");
  if (init.error || init.status !== 200) { return {posts: [init]}; }
  const h = {"Mcp-Protocol-Version": "2025-06-18"};
  if (init.session) { h["Mcp-Session-Id"] = init.session; }
  const posts = [init, await post(base + "/mcp", initialized, "json", h), await post(base + "/mcp", call(5, code), "json", h)];
  return {posts: posts, output: posts[2].text || ""};
}

// rebound: this page's origin is the server's own port under a name that
// resolves to loopback (a DNS rebinding): same-origin requests.
async function rebound(code) {
  const report = {};
  try { const r = await fetch("/healthz"); report.healthz = r.status + " " + await r.text(); } catch (e) { report.healthz = String(e); }
  report.mcp = await post("/mcp", call(6, code), "json");
  report.sse = await post("/message?sessionId=x", call(6, code), "json");
  try { const r = await fetch("/sse"); report.stream = r.status + " " + r.headers.get("Content-Type"); } catch (e) { report.stream = String(e); }
  return report;
}

function run(p) {
  window.report = null;
  p.then((r) => { window.report = JSON.stringify(r); }, (e) => { window.report = JSON.stringify({error: String(e)}); });
}
`

// crossOriginPage is the page that serves pageScript.
const crossOriginPage = "<!doctype html>\n<meta charset=\"utf-8\">\n<title>cross-origin page</title>\n<script>" + pageScript + "</script>\n<p>cross-origin page</p>\n"

// pageServer serves crossOriginPage on a loopback port of its own: an
// origin other than the codeexec server's.
func pageServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, crossOriginPage)
	}))
	t.Cleanup(s.Close)
	return s
}

// pageRun runs a function of crossOriginPage in the page that ctx shows and
// returns its report.
func pageRun(t *testing.T, ctx context.Context, call string) string {
	t.Helper()
	var report string
	err := chromedp.Run(ctx,
		chromedp.Evaluate("run("+call+")", nil),
		chromedp.Poll("window.report", &report, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(0)),
	)
	if err != nil {
		t.Fatalf("running %s in the page: %v", call, err)
	}
	return report
}

// runsTotal is the sum of codeexec_runs_total, whatever the labels.
func runsTotal(t *testing.T, metricsURL string) float64 {
	t.Helper()
	var n float64
	for _, m := range scrapeMetrics(t, metricsURL)["codeexec_runs_total"].GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return n
}

// openSession opens an SSE session as a client that is not a browser (no
// Origin) and initializes it; it returns the message endpoint and the
// response headers of the stream, which stays open until cleanup.
func openSession(t *testing.T, base string) (string, http.Header) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sse", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sse: %v %v", resp, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	var endpoint string
	for br := bufio.NewReader(resp.Body); endpoint == ""; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the SSE stream ended before announcing its endpoint: %v", err)
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			endpoint = d
		}
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	} {
		resp, err := http.Post(endpoint, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s: %s", endpoint, resp.Status)
		}
	}
	return endpoint, resp.Header
}

// TestCrossOriginBrowser: a web page of another origin, in headless
// Chromium, cannot make either HTTP transport of a server on loopback
// without a token run code (issue 26): not with an EventSource and no-cors
// posts of text/plain (which ran code through SSE and let the page read its
// output), not with form types or CORS requests, not against a live
// session it did not open, and not through a name that resolves to
// loopback (DNS rebinding). A page of an origin listed in
// CODE_EXEC_ALLOWED_ORIGINS can, and so can the official Go SDK client,
// which sends no Origin. codeexec_runs_total counts exactly the runs of
// those two.
func TestCrossOriginBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t, chromedp.Flag("host-resolver-rules", "MAP rebind.test 127.0.0.1"))
	attacker, friend := pageServer(t), pageServer(t)
	const attack = `print("pwned-" + str(6*7))`
	for _, transport := range []string{sse, http_} {
		t.Run(transport, func(t *testing.T) {
			s := startHTTP(t, transport, serverEnv(t, map[string]string{
				"CODE_EXEC_METRICS_ADDR":    "127.0.0.1:0",
				"CODE_EXEC_ALLOWED_ORIGINS": friend.URL,
				"CODE_EXEC_LOG_LEVEL":       "info",
			}))
			metricsURL := logField(s.stderr.String(), "metrics", "url")
			if metricsURL == "" {
				t.Fatal("the server did not log its metrics URL")
			}
			base := s.baseURL
			js := func(v string) string { b, _ := jsonMarshal(v); return string(b) }
			if err := chromedp.Run(ctx, chromedp.Navigate(attacker.URL)); err != nil {
				t.Fatal(err)
			}
			var report string
			if transport == sse {
				endpoint, header := openSession(t, base)
				if o := header.Get("Access-Control-Allow-Origin"); o != "" {
					t.Errorf("GET /sse answers Access-Control-Allow-Origin: %s; want none for a request without Origin", o)
				}
				report = pageRun(t, ctx, "attackSSE("+js(base)+", "+js(endpoint)+", "+js(attack)+")")
			} else {
				report = pageRun(t, ctx, "attackHTTP("+js(base)+", "+js(attack)+")")
			}
			t.Logf("what the page of %s saw: %s", attacker.URL, report)
			if strings.Contains(report, "pwned-42") {
				t.Errorf("a page of another origin ran code and read its output: %s", report)
			}
			if n := runsTotal(t, metricsURL); n != 0 {
				t.Errorf("after the page of another origin, codeexec_runs_total is %v, want 0", n)
			}

			// DNS rebinding: the server's own port under a name that is
			// not loopback's.
			_, port, _ := strings.Cut(strings.TrimPrefix(base, "http://"), ":")
			// Whatever it answers, the document takes the script.
			if err := chromedp.Run(ctx, chromedp.Navigate("http://rebind.test:"+port+"/healthz"), chromedp.Evaluate(pageScript, nil)); err != nil {
				t.Fatal(err)
			}
			report = pageRun(t, ctx, "rebound("+js(attack)+")")
			t.Logf("what a page of http://rebind.test:%s saw: %s", port, report)
			if strings.Contains(report, "pwned-42") || strings.Contains(report, `"healthz":"200`) || strings.Contains(report, `text/event-stream`) {
				t.Errorf("a page of a name rebound to loopback was served: %s", report)
			}
			if n := runsTotal(t, metricsURL); n != 0 {
				t.Errorf("after the rebound page, codeexec_runs_total is %v, want 0", n)
			}

			// The origin the operator listed is served, CORS included.
			if err := chromedp.Run(ctx, chromedp.Navigate(friend.URL)); err != nil {
				t.Fatal(err)
			}
			use := "useHTTP"
			if transport == sse {
				use = "useSSE"
			}
			report = pageRun(t, ctx, use+"("+js(base)+", "+js(`print("allowed-" + str(6*7))`)+")")
			t.Logf("what the page of the listed origin %s saw: %s", friend.URL, abbrev(report))
			if !strings.Contains(report, "allowed-42") {
				t.Errorf("the page of the listed origin %s did not get its output: %s", friend.URL, report)
			}
			// The Go SDK client sends no Origin, and is served.
			checkExample(t, dial(t, s, connectOpts{}), "process")
			if n := runsTotal(t, metricsURL); n != 2 {
				t.Errorf("codeexec_runs_total is %v, want 2 (the listed origin's run and the Go client's)", n)
			}
		})
	}
}
