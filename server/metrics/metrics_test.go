package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/server/httpserve"
	"github.com/codeexec/codeexec/server/metrics"
	"github.com/codeexec/codeexec/server/principals"
)

// scrape fetches /metrics from h and parses it with the Prometheus text parser.
func scrape(t *testing.T, h http.Handler, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d: %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value returns the value of the sample of family name whose labels include
// want, or -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
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
		case m.Untyped != nil:
			return m.GetUntyped().GetValue()
		}
	}
	return -1
}

func TestEveryNameHasThePrefix(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Info{Version: "v1.2.3", Mode: sandbox.ModeProcess})
	m.SetPool(func() metrics.PoolStats { return metrics.PoolStats{Ready: map[string]int{"python": 2}} })
	fams := scrape(t, m.Handler("", httpserve.Policy{}), "")
	if len(fams) < 10 {
		t.Fatalf("only %d metric families", len(fams))
	}
	for name := range fams {
		if !strings.HasPrefix(name, "codeexec_") {
			t.Errorf("metric %s does not start with codeexec_", name)
		}
	}
	if got := value(fams, "codeexec_build_info", map[string]string{"version": "v1.2.3", "mode": "process"}); got != 1 {
		t.Errorf("codeexec_build_info = %v, want 1 with version and mode labels", got)
	}
}

func TestRunsByOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		res     *sandbox.Result
		err     error
		outcome string
	}{
		{&sandbox.Result{}, nil, metrics.OutcomeOK},
		{&sandbox.Result{ExitCode: 3}, nil, metrics.OutcomeExitNonZero},
		{&sandbox.Result{TimedOut: true, ExitCode: 137}, nil, metrics.OutcomeTimeout},
		{&sandbox.Result{OOMKilled: true}, nil, metrics.OutcomeOOM},
		{&sandbox.Result{Truncated: true}, nil, metrics.OutcomeOutputLimit},
		{nil, &approvals.DeniedError{Decision: approvals.Decision{Outcome: approvals.OutcomeDenied}}, metrics.OutcomeDenied},
		{nil, &approvals.InputRequiredError{}, metrics.OutcomeInputRequired},
		{nil, fmt.Errorf("waiting: %w", context.Canceled), metrics.OutcomeCancelled},
		{nil, fmt.Errorf("x: %w", sandbox.ErrLanguageUnavailable), metrics.OutcomeRejected},
		{nil, &principals.RefusedError{Principal: "p", Field: "languages"}, metrics.OutcomeRejected},
		{nil, &principals.LimitedError{Principal: "p", Field: "runs_per_minute"}, metrics.OutcomeLimited},
		{nil, fmt.Errorf("docker: %w: engine gone", sandbox.ErrSandboxUnavailable), metrics.OutcomeError},
		{nil, nil, metrics.OutcomeError},
	}
	for _, tt := range tests {
		t.Run(tt.outcome, func(t *testing.T) {
			t.Parallel()
			if got := metrics.Outcome(tt.res, tt.err); got != tt.outcome {
				t.Errorf("Outcome(%+v, %v) = %q, want %q", tt.res, tt.err, got, tt.outcome)
			}
		})
	}
}

// TestRunsByPrincipal: runs are counted by principal, at most
// MaxPrincipals names, the later ones as "other".
func TestRunsByPrincipal(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Info{Version: "dev", Mode: sandbox.ModeProcess})
	r := m.Wrap(&sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}})
	run := func(name string) {
		ctx := principals.WithPrincipal(context.Background(), principals.Builtin(name, principals.Defaults{}))
		if _, err := r.Run(ctx, sandbox.Request{Language: "python", Code: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	run("first")
	run("first")
	for i := range metrics.MaxPrincipals + 5 {
		run(fmt.Sprintf("p%03d", i))
	}
	fams := scrape(t, m.Handler("", httpserve.Policy{}), "")
	if got := value(fams, "codeexec_runs_total", map[string]string{"principal": "first", "outcome": "ok"}); got != 2 {
		t.Errorf("runs of principal first: %v, want 2", got)
	}
	if got := value(fams, "codeexec_runs_total", map[string]string{"principal": metrics.OtherPrincipal}); got != 6 {
		t.Errorf("runs of the principals beyond the first %d: %v, want 6", metrics.MaxPrincipals, got)
	}
	if n := len(fams["codeexec_runs_total"].GetMetric()); n != metrics.MaxPrincipals+1 {
		t.Errorf("%d series of codeexec_runs_total, want %d", n, metrics.MaxPrincipals+1)
	}
}

// TestDecoratorsRecordStages runs through Wrap(gate-like Stage(Limit(Stage(fake))))
// and checks the counters and the three latency histograms.
// On synctest's clock, so that the waits it records are exactly the fakes'.
func TestDecoratorsRecordStages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := metrics.New(metrics.Info{Version: "dev", Mode: sandbox.ModeDocker})
		fake := &sandboxtest.Fake{RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			time.Sleep(20 * time.Millisecond)
			if req.Code == "fail" {
				return &sandbox.Result{ExitCode: 1}, nil
			}
			return &sandbox.Result{}, nil
		}}
		inner := sandbox.Limit(m.Stage(metrics.StageStarted, fake), 1)
		approving := &sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeDocker}, RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			time.Sleep(30 * time.Millisecond) // a person thinks
			return m.Stage(metrics.StageApproved, inner).Run(ctx, req)
		}}
		r := m.Wrap(approving)
		for _, code := range []string{"ok", "ok", "fail"} {
			if _, err := r.Run(context.Background(), sandbox.Request{Language: "python", Code: code}); err != nil {
				t.Fatal(err)
			}
		}
		// A session's creation runs no code: it is not a run.
		if _, err := r.Run(context.Background(), sandbox.Request{Language: "python", NewSession: &sandbox.NewSession{}}); err != nil {
			t.Fatal(err)
		}
		fams := scrape(t, m.Handler("", httpserve.Policy{}), "")
		checks := []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"codeexec_runs_total", map[string]string{"mode": "docker", "language": "python", "outcome": "ok"}, 2},
			{"codeexec_runs_total", map[string]string{"mode": "docker", "language": "python", "outcome": "exit_nonzero"}, 1},
			{"codeexec_run_duration_seconds", map[string]string{"mode": "docker", "language": "python"}, 3},
			{"codeexec_approval_wait_seconds", nil, 3},
			{"codeexec_queue_wait_seconds", nil, 3},
			{"codeexec_runs_in_flight", nil, 0},
		}
		for _, c := range checks {
			if got := value(fams, c.name, c.labels); got != c.want {
				t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
			}
		}
		// On the bubble's clock each wait is exactly what the fakes slept.
		for _, c := range []struct {
			name string
			want float64
		}{
			{"codeexec_approval_wait_seconds", 3 * 0.030},
			{"codeexec_queue_wait_seconds", 0},
			{"codeexec_run_duration_seconds", 3 * 0.020},
		} {
			if got := fams[c.name].GetMetric()[0].GetHistogram().GetSampleSum(); math.Abs(got-c.want) > 1e-9 {
				t.Errorf("%s sum = %v s, want %v s", c.name, got, c.want)
			}
		}
	})
}

func TestRunWithoutStagesRecordsOnlyTheOutcome(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Info{Mode: sandbox.ModeNone})
	r := m.Wrap(&sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeNone}, RunFunc: func(context.Context, sandbox.Request) (*sandbox.Result, error) {
		return nil, fmt.Errorf("denied: %w", approvals.ErrNotApproved)
	}})
	if _, err := r.Run(context.Background(), sandbox.Request{Language: "bash"}); !errors.Is(err, approvals.ErrNotApproved) {
		t.Fatalf("err = %v, want the runner's error passed through", err)
	}
	fams := scrape(t, m.Handler("", httpserve.Policy{}), "")
	if got := value(fams, "codeexec_runs_total", map[string]string{"outcome": "denied", "language": "bash", "mode": "none"}); got != 1 {
		t.Errorf("denied runs = %v, want 1", got)
	}
	if got := value(fams, "codeexec_run_duration_seconds", nil); got > 0 {
		t.Errorf("run duration recorded %v samples for a run that never started", got)
	}
}

func TestNilMetricsIsANoOp(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	fake := &sandboxtest.Fake{}
	if got := m.Wrap(fake); got != sandbox.Runner(fake) {
		t.Errorf("nil Metrics wrapped the runner")
	}
	if got := m.Stage(metrics.StageStarted, fake); got != sandbox.Runner(fake) {
		t.Errorf("nil Metrics staged the runner")
	}
	m.ApprovalDecided(approvals.OutcomeApproved)
	m.SetSessions(func() int { return 3 })
	m.TaskStatuses(map[string]int{"working": 1})
	m.ProgressSent(2)
	m.SetPool(nil)
}

func TestGaugesAndPool(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Info{Mode: sandbox.ModeDocker})
	m.SetPool(func() metrics.PoolStats {
		return metrics.PoolStats{Ready: map[string]int{"python": 2, "bash": 1}, Hits: 7, Misses: 3}
	})
	pending := 4
	m.SetApprovalsPending(func() int { return pending })
	m.ApprovalDecided(approvals.OutcomeApproved)
	m.ApprovalDecided(approvals.OutcomeApproved)
	m.ApprovalDecided(approvals.OutcomeTimedOut)
	m.SetSessions(func() int { return 5 })
	m.TaskStatuses(map[string]int{"working": 2, "completed": 1})
	m.ProgressSent(10)
	m.ProgressDropped(2)
	fams := scrape(t, m.Handler("", httpserve.Policy{}), "")
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"codeexec_docker_pool_ready", map[string]string{"language": "python"}, 2},
		{"codeexec_docker_pool_ready", map[string]string{"language": "bash"}, 1},
		{"codeexec_docker_pool_hits_total", nil, 7},
		{"codeexec_docker_pool_misses_total", nil, 3},
		{"codeexec_approvals_pending", nil, 4},
		{"codeexec_approvals_decided_total", map[string]string{"outcome": "approved"}, 2},
		{"codeexec_approvals_decided_total", map[string]string{"outcome": "timed_out"}, 1},
		{"codeexec_sessions", nil, 5},
		{"codeexec_tasks", map[string]string{"status": "working"}, 2},
		{"codeexec_tasks", map[string]string{"status": "completed"}, 1},
		{"codeexec_tasks", map[string]string{"status": "cancelled"}, 0},
		{"codeexec_progress_notifications_total", nil, 10},
		{"codeexec_progress_lines_dropped_total", nil, 2},
	}
	for _, c := range checks {
		if got := value(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func TestHandlerTokenAndProbes(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Info{Mode: sandbox.ModeProcess})
	h := m.Handler("0123456789abcdef-token", httpserve.Policy{})
	get := func(path, auth string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	tests := []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "Bearer wrong", http.StatusUnauthorized},
		{"/metrics", "Bearer 0123456789abcdef-token", http.StatusOK},
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusServiceUnavailable}, // no check set yet: starting
	}
	for _, tt := range tests {
		if code, body := get(tt.path, tt.auth); code != tt.want {
			t.Errorf("GET %s (auth %q) = %d, want %d: %s", tt.path, tt.auth, code, tt.want, body)
		}
	}
	var err error = errors.New("pool is warming")
	m.SetReady(func(context.Context) error { return err })
	if code, body := get("/readyz", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "pool is warming") {
		t.Errorf("GET /readyz while warming = %d %q, want 503 naming the reason", code, body)
	}
	err = nil
	if code, _ := get("/readyz", ""); code != http.StatusOK {
		t.Errorf("GET /readyz once ready = %d, want 200", code)
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Info{Mode: sandbox.ModeProcess})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln, "", httpserve.Policy{}) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "codeexec_build_info") {
		t.Errorf("GET /metrics = %d, body without codeexec_build_info", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v after its context ended, want nil", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return after its context ended")
	}
}

// TestHandlerRefusesBrowsers: the metrics listener shares the rule every
// listener applies to browsers: a foreign Origin, or a Host that is not
// loopback's on a loopback listener, is refused on every path.
func TestHandlerRefusesBrowsers(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Info{Mode: sandbox.ModeProcess})
	m.SetReady(func(context.Context) error { return nil })
	srv := httptest.NewServer(m.Handler("", httpserve.Policy{AllowedOrigins: []string{"http://localhost:3000"}}))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		for _, c := range []struct {
			header, value string
			want          int
		}{
			{"Origin", "https://evil.example", http.StatusForbidden},
			{"Origin", "null", http.StatusForbidden},
			{"Host", "rebind.example", http.StatusForbidden},
			{"Origin", "http://localhost:3000", http.StatusOK},
			{"Origin", srv.URL, http.StatusOK},
			{"", "", http.StatusOK},
		} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			if c.header == "Host" {
				req.Host = c.value
			} else if c.header != "" {
				req.Header.Set(c.header, c.value)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want || resp.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("GET %s with %s %q: %s (Access-Control-Allow-Origin %q), want %d and no CORS", path, c.header, c.value, resp.Status, resp.Header.Get("Access-Control-Allow-Origin"), c.want)
			}
		}
	}
}
