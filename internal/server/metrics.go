package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/registry"
)

// metrics are the server's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg          *prometheus.Registry
	execs        *prometheus.CounterVec
	execDuration prometheus.Histogram
	stopLatency  prometheus.Histogram
	api          *prometheus.HistogramVec
	authFailures prometheus.Counter
	reaped       *prometheus.CounterVec
	unknown      prometheus.Gauge

	mu          sync.Mutex
	tenantExecs map[string]map[string]int // finished execs by tenant, then outcome
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		tenantExecs: map[string]map[string]int{},
		reg:         prometheus.NewRegistry(),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runbox_execs_total",
			Help: "Execs run through the server, by outcome (exited, timed_out, cancelled, refused, lost).",
		}, []string{"outcome"}),
		execDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "runbox_exec_duration_seconds",
			Help:    "Run time of finished execs, on runboxd's clock.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		stopLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "runbox_exec_stop_seconds",
			Help:    "For execs stopped by their timeout: from the deadline to the exec's end (TERM, grace, KILL, last process gone).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		api: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runbox_api_request_duration_seconds",
			Help:    "API calls by procedure and Connect code; streams count until they end.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"procedure", "code"}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runbox_auth_failures_total",
			Help: "Requests refused for a missing, unknown or revoked bearer token.",
		}),
		reaped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runbox_sandboxes_reaped_total",
			Help: "Sandboxes the reaper removed, by reason (idle, max_lifetime).",
		}, []string{"reason"}),
		unknown: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runbox_unknown_sandboxes",
			Help: "Sandboxes the providers had at start that the registry does not know (reported, never adopted or deleted).",
		}),
	}
	m.reg.MustRegister(s.cleanups.metric(), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "runbox_cleanups_pending",
		Help: "Failed cleanups waiting for the reaper's retry.",
	}, func() float64 { return float64(s.cleanups.pendingCount()) }))
	m.reg.MustRegister(m.execs, m.execDuration, m.stopLatency, m.api, m.authFailures, m.reaped, m.unknown,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&sandboxCollector{s: s},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "runbox_running_execs",
			Help: "Execs started through the server that have not ended.",
		}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(len(s.execs))
		}))
	return m
}

// handler serves /metrics: the operator's tenant (Config.OperatorTenant)
// gets the server-wide registry, any other tenant only its own figures
// (tenantCollector), never another tenant's.
func (m *metrics) handler(s *Server) http.Handler {
	all := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := tenantOf(r.Context())
		if s.cfg.OperatorTenant != "" && t.Name == s.cfg.OperatorTenant {
			all.ServeHTTP(w, r)
			return
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(&tenantCollector{s: s, tenant: t.Name})
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
}

// execEnded counts an ended exec of tenant by outcome, server-wide and
// for the tenant.
func (m *metrics) execEnded(tenant, outcome string) {
	m.execs.WithLabelValues(outcome).Inc()
	m.mu.Lock()
	defer m.mu.Unlock()
	byOutcome := m.tenantExecs[tenant]
	if byOutcome == nil {
		byOutcome = map[string]int{}
		m.tenantExecs[tenant] = byOutcome
	}
	byOutcome[outcome]++
}

// execDone counts a finished exec of tenant.
func (m *metrics) execDone(tenant, outcome string, res *runboxv1.Result, timeout time.Duration) {
	m.execEnded(tenant, outcome)
	d := time.Duration(res.GetDurationUs()) * time.Microsecond
	m.execDuration.Observe(d.Seconds())
	if res.GetTimedOut() && timeout > 0 && d >= timeout {
		m.stopLatency.Observe((d - timeout).Seconds())
	}
}

// interceptor times every API call by procedure and code, and logs the
// calls that fail (at debug level those that succeed).
func (m *metrics) interceptor(log *slog.Logger) connect.Interceptor { return apiTimer{m, log} }

type apiTimer struct {
	m   *metrics
	log *slog.Logger
}

func (a apiTimer) observe(ctx context.Context, procedure string, start time.Time, err error) {
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	d := time.Since(start)
	a.m.api.WithLabelValues(procedure, code).Observe(d.Seconds())
	level := slog.LevelDebug
	if err != nil && connect.CodeOf(err) != connect.CodeCanceled {
		level = slog.LevelInfo
	}
	if a.log.Enabled(ctx, level) {
		attrs := []any{"procedure", procedure, "code", code, "duration_ms", float64(d.Microseconds()) / 1000,
			"tenant", tenantOf(ctx).Name}
		if err != nil {
			attrs = append(attrs, "err", err.Error())
		}
		a.log.Log(ctx, level, "call", attrs...)
	}
}

func (a apiTimer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		a.observe(ctx, req.Spec().Procedure, start, err)
		return resp, err
	}
}

func (a apiTimer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a apiTimer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		a.observe(ctx, conn.Spec().Procedure, start, err)
		return err
	}
}

// sandboxCollector reports the registry's sandboxes by provider and state
// when scraped.
type sandboxCollector struct{ s *Server }

var sandboxesDesc = prometheus.NewDesc("runbox_sandboxes", "Registered sandboxes by provider and state (ready, lost).",
	[]string{"provider", "state"}, nil)

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sandboxesDesc }

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	collectSandboxes(c.s, "", ch)
}

// collectSandboxes sends the registry's sandboxes of tenant ("": every
// tenant) by provider and state.
func collectSandboxes(s *Server, tenant string, ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	recs, err := s.store.ListSandboxes(ctx, tenant)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(sandboxesDesc, errors.Join(errors.New("read registry"), err))
		return
	}
	counts := map[[2]string]int{}
	for name := range s.cfg.Providers {
		counts[[2]string{name, registry.StateReady}] = 0
		counts[[2]string{name, registry.StateLost}] = 0
	}
	for _, r := range recs {
		counts[[2]string{r.Provider, r.State}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

var (
	tenantExecsDesc = prometheus.NewDesc("runbox_execs_total",
		"The tenant's execs run through the server, by outcome (exited, timed_out, cancelled, refused, lost).",
		[]string{"outcome"}, nil)
	tenantRunningDesc = prometheus.NewDesc("runbox_running_execs",
		"The tenant's execs started through the server that have not ended.", nil, nil)
)

// tenantCollector is the /metrics of a tenant other than the operator:
// its execs by outcome, its running execs and its sandboxes, nothing
// server-wide.
type tenantCollector struct {
	s      *Server
	tenant string
}

func (c *tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tenantExecsDesc
	ch <- tenantRunningDesc
	ch <- sandboxesDesc
}

func (c *tenantCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.s.metrics
	m.mu.Lock()
	counts := map[string]int{}
	for _, o := range []string{registry.OutcomeExited, registry.OutcomeTimedOut, registry.OutcomeCancelled,
		registry.OutcomeRefused, registry.OutcomeLost} {
		counts[o] = 0
	}
	for o, n := range m.tenantExecs[c.tenant] {
		counts[o] = n
	}
	m.mu.Unlock()
	for o, n := range counts {
		ch <- prometheus.MustNewConstMetric(tenantExecsDesc, prometheus.CounterValue, float64(n), o)
	}
	c.s.mu.Lock()
	running := 0
	for _, t := range c.s.execs {
		if t.tenant == c.tenant {
			running++
		}
	}
	c.s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(tenantRunningDesc, prometheus.GaugeValue, float64(running))
	collectSandboxes(c.s, c.tenant, ch)
}
