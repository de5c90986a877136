package gateway

import (
	"strconv"
	"time"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Metrics in the Prometheus text format. We use client_golang, the
// reference implementation, rather than printing the format by hand:
// histogram buckets and their cumulative counts, label escaping, HELP/TYPE
// lines, content negotiation (text vs. OpenMetrics) and gzip are easy to
// get subtly wrong, and every scraper is tested against this library. The
// registry is the gateway's own, not the global one, so tests can build
// several daemons in one process.

type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	ttft     *prometheus.HistogramVec
	itl      *prometheus.HistogramVec
	handler  fasthttp.RequestHandler
}

func newMetrics(srv *daemon.Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pocketd_http_requests_total",
		Help: "Gateway requests by route and HTTP status.",
	}, []string{"route", "status"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pocketd_http_request_duration_seconds",
		Help:    "Time to the end of the handler (a stream's first token), by route.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
	}, []string{"route"})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pocketd_time_to_first_token_seconds",
		Help:    "Time from a gateway request's arrival to its first generated token.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
	}, []string{"model"})
	m.itl = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pocketd_inter_token_latency_seconds",
		Help:    "Time between consecutive generated tokens of a gateway request.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
	}, []string{"model"})
	m.reg.MustRegister(m.requests, m.duration, m.ttft, m.itl, &statsCollector{srv: srv},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return m
}

func (m *metrics) serve(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET")
		writeError(ctx, &apiError{status: fasthttp.StatusMethodNotAllowed, msg: "method " + string(ctx.Method()) + " not allowed; use GET"})
		return
	}
	m.handler(ctx)
}

// instrument counts a route's requests by status.
func (m *metrics) instrument(route string, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	dur := m.duration.WithLabelValues(route)
	return func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		h(ctx)
		dur.Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(route, strconv.Itoa(ctx.Response.StatusCode())).Inc()
	}
}

// latency returns the token-latency observers of a model.
func (m *metrics) latency(model string) (ttft, itl prometheus.Observer) {
	return m.ttft.WithLabelValues(model), m.itl.WithLabelValues(model)
}

// statsCollector reads the session manager's counters and gauges at
// scrape time (they cover /v0 as well as the gateway).
type statsCollector struct{ srv *daemon.Server }

var (
	descPrompt     = prometheus.NewDesc("pocketd_prompt_tokens_total", "Prompt tokens of generations (all APIs).", nil, nil)
	descCached     = prometheus.NewDesc("pocketd_cached_prompt_tokens_total", "Prompt tokens whose KV was reused (live session or prefix cache) instead of computed.", nil, nil)
	descCompletion = prometheus.NewDesc("pocketd_completion_tokens_total", "Generated tokens.", nil, nil)
	descPrefilled  = prometheus.NewDesc("pocketd_prefilled_tokens_total", "Positions run through the model in prefill.", nil, nil)
	descSteps      = prometheus.NewDesc("pocketd_scheduler_steps_total", "Forward steps run by the schedulers.", nil, nil)
	descQueue      = prometheus.NewDesc("pocketd_queue_depth", "Scheduler steps waiting to run, all models.", nil, nil)
	descInFlight   = prometheus.NewDesc("pocketd_requests_in_flight", "Generation requests admitted and not finished, all models.", nil, nil)
	descSessions   = prometheus.NewDesc("pocketd_sessions", "Open /v0 sessions.", nil, nil)
	descKV         = prometheus.NewDesc("pocketd_kv_blocks", "KV cache blocks by state: used (held by sequences), cached (kept for prefix reuse), total.", []string{"model", "state"}, nil)
	descHost       = prometheus.NewDesc("pocketd_host_tier_bytes", "Bytes of evicted KV blocks held in the host-memory tier.", []string{"model"}, nil)
	descHostLimit  = prometheus.NewDesc("pocketd_host_tier_limit_bytes", "Bound of the host-memory tier.", []string{"model"}, nil)
	descSnaps      = prometheus.NewDesc("pocketd_state_snapshots", "Recurrent-state snapshots of a hybrid model, by where the state is kept: the daemon's memory or the worker's device.", []string{"model", "where"}, nil)
	descSnapBytes  = prometheus.NewDesc("pocketd_state_snapshot_bytes", "Bytes of recurrent-state snapshots (both places), against the model's snapshot budget.", []string{"model"}, nil)
	descForward    = prometheus.NewDesc("pocketd_forward_seconds_total", "Time in forward passes, by kind: decode (one-token steps) or prefill (chunks).", []string{"kind"}, nil)
	descWrites     = prometheus.NewDesc("pocketd_history_writes_total", "Durable writes of session histories.", nil, nil)
	descWriteTime  = prometheus.NewDesc("pocketd_history_write_seconds_total", "Time in durable writes of session histories (fsync included).", nil, nil)
)

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPrompt, descCached, descCompletion, descPrefilled, descSteps,
		descQueue, descInFlight, descSessions, descKV, descHost, descHostLimit, descSnaps, descSnapBytes, descForward, descWrites,
		descWriteTime} {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	mgr := c.srv.Sessions()
	if mgr == nil {
		return // still loading
	}
	st := mgr.Stats()
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(descPrompt, st.PromptTokens)
	counter(descCached, st.CachedTokens)
	counter(descCompletion, st.CompletionTokens)
	counter(descPrefilled, st.PrefilledTokens)
	counter(descSteps, st.Steps)
	ch <- prometheus.MustNewConstMetric(descForward, prometheus.CounterValue, st.DecodeSeconds, "decode")
	ch <- prometheus.MustNewConstMetric(descForward, prometheus.CounterValue, st.PrefillSeconds, "prefill")
	counter(descWrites, st.HistoryWrites)
	ch <- prometheus.MustNewConstMetric(descWriteTime, prometheus.CounterValue, st.HistoryWriteSeconds)
	gauge(descQueue, float64(st.QueueDepth))
	gauge(descInFlight, float64(st.InFlight))
	gauge(descSessions, float64(st.Sessions))
	for _, m := range mgr.Models() {
		gauge(descKV, float64(m.KVBlocksUsed), m.Name, "used")
		gauge(descKV, float64(m.KVBlocksCache), m.Name, "cached")
		gauge(descKV, float64(m.KVBlocksTotal), m.Name, "total")
		gauge(descHost, float64(m.HostTierBytes), m.Name)
		gauge(descHostLimit, float64(m.HostTierLimit), m.Name)
		gauge(descSnaps, float64(m.Snapshots-m.HeldSnapshots), m.Name, "daemon")
		gauge(descSnaps, float64(m.HeldSnapshots), m.Name, "worker")
		gauge(descSnapBytes, float64(m.SnapshotBytes), m.Name)
	}
}
