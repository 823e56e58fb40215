// Package metrics exposes codeexec's Prometheus metrics from a private
// registry: runs by mode, language and outcome, the latency of each stage of
// a run (queue wait, approval wait, run), the docker warm pool, approvals,
// sessions and tasks, and the build. Every metric name starts with
// "codeexec_".
//
// A Metrics is fed by the Runner decorators of this package (see Wrap and
// Stage) and by the small methods and providers the rest of the server
// calls; Handler serves it at /metrics with /healthz and /readyz.
package metrics

import (
	"context"
	"errors"
	"runtime"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/sandbox"
)

// Namespace is the prefix of every metric name, with its underscore.
const Namespace = "codeexec"

// Outcomes of a run, the values of the outcome label of codeexec_runs_total.
const (
	OutcomeOK            = "ok"             // ran to completion with exit code 0
	OutcomeExitNonZero   = "exit_nonzero"   // ran to completion with another exit code
	OutcomeTimeout       = "timeout"        // stopped at its time limit
	OutcomeOOM           = "oom"            // stopped at its memory limit
	OutcomeOutputLimit   = "output_limit"   // stopped at the output cap
	OutcomeDenied        = "denied"         // approval denied, timed out or withdrawn
	OutcomeInputRequired = "input_required" // the approval question went back to the client
	OutcomeCancelled     = "cancelled"      // the client cancelled or went away
	OutcomeRejected      = "rejected"       // unknown or unavailable language, or not allowed to its principal
	OutcomeLimited       = "limited"        // over its principal's max_concurrent or runs_per_minute
	OutcomeError         = "error"          // the sandbox failed
)

// MaxPrincipals bounds the values of the principal label: the first
// MaxPrincipals principals to run something have their own, any later one
// is counted as OtherPrincipal (a principals file that names more, or
// reloads that rename many, cannot grow the series without bound).
const MaxPrincipals = 100

// OtherPrincipal is the principal label of the principals beyond
// MaxPrincipals.
const OtherPrincipal = "other"

// PoolStats is what a warm pool of containers reports at scrape time.
type PoolStats struct {
	// Ready counts the warm containers waiting, by language.
	Ready map[string]int
	// Hits and Misses count runs that took a warm container and runs that
	// found none, since start.
	Hits, Misses int64
}

// Metrics holds codeexec's collectors in a private registry. The zero value
// is not usable: call New. All methods are safe for concurrent use; a nil
// *Metrics ignores every call, so that code can record unconditionally.
type Metrics struct {
	reg *prometheus.Registry

	runs          *prometheus.CounterVec
	runDuration   *prometheus.HistogramVec
	queueWait     prometheus.Histogram
	approvalWait  prometheus.Histogram
	inFlight      prometheus.Gauge
	decided       *prometheus.CounterVec
	tasks         *prometheus.GaugeVec
	progressSent  prometheus.Counter
	progressDrops prometheus.Counter

	mu       sync.Mutex
	named    map[string]bool // the principal label's values
	ready    func(context.Context) error
	pool     func() PoolStats
	pending  func() int
	sessions func() int
}

// Info describes the build and configuration for codeexec_build_info.
type Info struct {
	Version string
	Mode    sandbox.Mode
}

// latencyBuckets span a fast run (10 ms) to a long task (an hour).
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// New returns Metrics registered in a fresh private registry, with the Go
// runtime and process collectors under the codeexec_ prefix.
func New(info Info) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), named: map[string]bool{}}
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "runs_total",
		Help: "Runs of code_execute by sandbox mode, language, principal (the caller; at most 100 names, later ones as \"other\") and outcome (ok, exit_nonzero, timeout, oom, output_limit, denied, input_required, cancelled, rejected, limited, error).",
	}, []string{"mode", "language", "principal", "outcome"})
	m.runDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "run_duration_seconds",
		Help:    "Wall-clock time of runs in the sandbox, from taking a run slot to the end of the run.",
		Buckets: latencyBuckets,
	}, []string{"mode", "language"})
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "queue_wait_seconds",
		Help:    "Time a run waited for a free run slot (CODE_EXEC_MAX_CONCURRENCY).",
		Buckets: latencyBuckets,
	})
	m.approvalWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "approval_wait_seconds",
		Help:    "Time from a request to its approval, for runs that went through the approval gate.",
		Buckets: latencyBuckets,
	})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "runs_in_flight",
		Help: "Requests of code_execute being handled now (waiting for approval, for a slot, or running).",
	})
	m.decided = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "approvals_decided_total",
		Help: "Approval decisions by outcome (approved, denied, timed_out, withdrawn, cancelled, ...).",
	}, []string{"outcome"})
	m.tasks = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "tasks",
		Help: "MCP tasks held now, by status (working, input_required, completed, failed, cancelled).",
	}, []string{"status"})
	m.progressSent = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "progress_notifications_total",
		Help: "Progress notifications sent with output lines or keep-alives.",
	})
	m.progressDrops = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "progress_lines_dropped_total",
		Help: "Output lines not sent as progress notifications because of the rate or size cap (they are still in the result).",
	})
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels name the version, the Go version and the sandbox mode.",
		ConstLabels: prometheus.Labels{"version": info.Version, "goversion": runtime.Version(), "mode": string(info.Mode)},
	})
	build.Set(1)

	m.reg.MustRegister(m.runs, m.runDuration, m.queueWait, m.approvalWait, m.inFlight,
		m.decided, m.tasks, m.progressSent, m.progressDrops, build)
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "approvals_pending",
			Help: "Requests waiting for a person's approval now.",
		}, m.count(&m.pending)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "sessions",
			Help: "Sessions (session_create) open now.",
		}, m.count(&m.sessions)),
		poolCollector{m},
	)
	prefixed := prometheus.WrapRegistererWithPrefix(Namespace+"_", m.reg)
	prefixed.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the private registry (for tests and Handler).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetPool makes the docker pool's statistics part of every scrape: p is
// called at each scrape and must be cheap and safe for concurrent use.
func (m *Metrics) SetPool(p func() PoolStats) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.pool = p
	m.mu.Unlock()
}

// count reads the counting function *f at scrape time (0 until it is set).
func (m *Metrics) count(f *func() int) func() float64 {
	return func() float64 {
		m.mu.Lock()
		n := *f
		m.mu.Unlock()
		if n == nil {
			return 0
		}
		return float64(n())
	}
}

// setCount sets the counting function *to (a field of m) to f.
func (m *Metrics) setCount(to *func() int, f func() int) {
	m.mu.Lock()
	*to = f
	m.mu.Unlock()
}

// SetApprovalsPending sets the function that counts pending approvals at
// scrape time.
func (m *Metrics) SetApprovalsPending(f func() int) {
	if m != nil {
		m.setCount(&m.pending, f)
	}
}

// SetSessions sets the function that counts the open sessions at scrape
// time (codeexec_sessions).
func (m *Metrics) SetSessions(f func() int) {
	if m != nil {
		m.setCount(&m.sessions, f)
	}
}

// SetReady sets the check behind /readyz: nil means ready. Until it is set,
// /readyz answers 503 (the sandbox is still starting).
func (m *Metrics) SetReady(f func(context.Context) error) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.ready = f
	m.mu.Unlock()
}

// errStarting is /readyz's answer before SetReady.
var errStarting = errors.New("the sandbox is starting")

// Ready runs the readiness check.
func (m *Metrics) Ready(ctx context.Context) error {
	m.mu.Lock()
	f := m.ready
	m.mu.Unlock()
	if f == nil {
		return errStarting
	}
	return f(ctx)
}

// principalLabel is the principal label of a run of name: its name while
// fewer than MaxPrincipals have one, OtherPrincipal after.
func (m *Metrics) principalLabel(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.named[name] {
		if len(m.named) >= MaxPrincipals {
			return OtherPrincipal
		}
		m.named[name] = true
	}
	return name
}

// ApprovalDecided counts one approval decision.
func (m *Metrics) ApprovalDecided(outcome approvals.Outcome) {
	if m == nil {
		return
	}
	m.decided.WithLabelValues(string(outcome)).Inc()
}

// TaskStatuses sets the number of tasks held in each status; statuses
// missing from counts are set to 0.
func (m *Metrics) TaskStatuses(counts map[string]int) {
	if m == nil {
		return
	}
	for _, s := range []string{"working", "input_required", "completed", "failed", "cancelled"} {
		m.tasks.WithLabelValues(s).Set(float64(counts[s]))
	}
	for s, n := range counts {
		m.tasks.WithLabelValues(s).Set(float64(n))
	}
}

// ProgressSent counts progress notifications sent.
func (m *Metrics) ProgressSent(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.progressSent.Add(float64(n))
}

// ProgressDropped counts output lines left out of progress notifications.
func (m *Metrics) ProgressDropped(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.progressDrops.Add(float64(n))
}

// poolCollector reads the pool's statistics at scrape time.
type poolCollector struct{ m *Metrics }

var (
	poolReadyDesc  = prometheus.NewDesc(Namespace+"_docker_pool_ready", "Warm containers waiting in docker mode's pool, by language.", []string{"language"}, nil)
	poolHitsDesc   = prometheus.NewDesc(Namespace+"_docker_pool_hits_total", "Runs that took a warm container from the pool.", nil, nil)
	poolMissesDesc = prometheus.NewDesc(Namespace+"_docker_pool_misses_total", "Runs that found no suitable warm container and created one.", nil, nil)
)

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolReadyDesc
	ch <- poolHitsDesc
	ch <- poolMissesDesc
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	p := c.m.pool
	c.m.mu.Unlock()
	if p == nil {
		return
	}
	st := p()
	for lang, n := range st.Ready {
		ch <- prometheus.MustNewConstMetric(poolReadyDesc, prometheus.GaugeValue, float64(n), lang)
	}
	ch <- prometheus.MustNewConstMetric(poolHitsDesc, prometheus.CounterValue, float64(st.Hits))
	ch <- prometheus.MustNewConstMetric(poolMissesDesc, prometheus.CounterValue, float64(st.Misses))
}
