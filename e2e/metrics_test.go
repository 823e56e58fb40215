package e2e

import (
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeMetrics fetches and parses /metrics with the Prometheus text parser.
func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// sample returns the value of the sample of name whose labels include want
// (a histogram's count), or 0.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
next:
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

// TestMetricsScrape: a scrape after some runs shows the counters moving.
func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	env := serverEnv(t, map[string]string{"CODE_EXEC_METRICS_ADDR": "127.0.0.1:0", "CODE_EXEC_LOG_LEVEL": "info"})
	s := startHTTP(t, http_, env)
	base := logField(s.stderr.String(), "metrics", "url")
	if base == "" {
		t.Fatalf("the server did not log its metrics URL")
	}
	root := base[:len(base)-len("/metrics")]
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(root + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200 (last: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	before := scrapeMetrics(t, base)
	cs := dial(t, s, connectOpts{})
	for _, c := range []map[string]any{
		{"language": "python", "code": "print(1)"},
		{"language": "python", "code": "print(2)"},
		{"language": "bash", "code": "exit 3"},
		{"language": "bash", "code": "sleep 5", "timeout_seconds": 1},
	} {
		call(t, cs, "code_execute", c)
	}
	after := scrapeMetrics(t, base)

	checks := []struct {
		name   string
		labels map[string]string
		delta  float64
	}{
		{"codeexec_runs_total", map[string]string{"mode": "process", "language": "python", "outcome": "ok"}, 2},
		{"codeexec_runs_total", map[string]string{"mode": "process", "language": "bash", "outcome": "exit_nonzero"}, 1},
		{"codeexec_runs_total", map[string]string{"mode": "process", "language": "bash", "outcome": "timeout"}, 1},
		{"codeexec_run_duration_seconds", map[string]string{"mode": "process", "language": "python"}, 2},
		{"codeexec_queue_wait_seconds", nil, 4},
	}
	for _, c := range checks {
		if got := sample(after, c.name, c.labels) - sample(before, c.name, c.labels); got != c.delta {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.delta)
		}
	}
	if sample(after, "codeexec_build_info", map[string]string{"version": testVersion, "mode": "process"}) != 1 {
		t.Errorf("codeexec_build_info lacks version %s and mode process", testVersion)
	}
	for name := range after {
		if len(name) < 9 || name[:9] != "codeexec_" {
			t.Errorf("metric %s does not start with codeexec_", name)
		}
	}
}

// TestMetricsCountEveryCall: over streamable HTTP, three code_execute calls
// in a session and one plain call each count once in every run metric
// (codeexec_runs_total, codeexec_run_duration_seconds and
// codeexec_queue_wait_seconds), and codeexec_sessions is the number of
// open sessions: 1 while the session is open, 0 once it is closed. In
// every mode (docker where an engine answers).
func TestMetricsCountEveryCall(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"process", "none", "docker"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testMetricsCountEveryCall(t, mode)
		})
	}
}

func testMetricsCountEveryCall(t *testing.T, mode string) {
	env, _ := sessionEnv(t, mode, map[string]string{"CODE_EXEC_METRICS_ADDR": "127.0.0.1:0"})
	s := startHTTP(t, http_, env)
	base := logField(s.stderr.String(), "metrics", "url")
	if base == "" {
		t.Fatalf("the server did not log its metrics URL")
	}
	cs := dial(t, s, connectOpts{protocolVersion: "2025-11-25"})
	before := scrapeMetrics(t, base)
	id := createSession(t, cs, map[string]any{"language": "python"})
	if n := sample(scrapeMetrics(t, base), "codeexec_sessions", nil); n != 1 {
		t.Errorf("codeexec_sessions is %v with one session open, want 1", n)
	}
	for _, code := range []string{"x = 41", "print(x + 1)", "x += 1"} {
		if res, out := inSession(t, cs, id, "python", code); res.IsError || out.ExitCode != 0 {
			t.Fatalf("in the session, %q: %s", code, text(res))
		}
	}
	if res := call(t, cs, "code_execute", map[string]any{"language": "python", "code": "print(1)"}); res.IsError {
		t.Fatalf("plain call: %s", text(res))
	}
	after := scrapeMetrics(t, base)
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"codeexec_runs_total", map[string]string{"mode": mode, "language": "python", "outcome": "ok"}},
		{"codeexec_run_duration_seconds", map[string]string{"mode": mode, "language": "python"}},
		{"codeexec_queue_wait_seconds", nil},
	} {
		if got := sample(after, c.name, c.labels) - sample(before, c.name, c.labels); got != 4 {
			t.Errorf("%s%v moved by %v after 3 calls in a session and 1 plain call, want 4", c.name, c.labels, got)
		}
	}
	if res := call(t, cs, "session_close", map[string]any{"session_id": id}); res.IsError {
		t.Fatalf("session_close: %s", text(res))
	}
	if n := sample(scrapeMetrics(t, base), "codeexec_sessions", nil); n != 0 {
		t.Errorf("codeexec_sessions is %v once the session is closed, want 0", n)
	}
}
