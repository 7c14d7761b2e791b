// Package metrics exposes a toolbus process to Prometheus: latency
// histograms of tool calls, MCP requests and expert-agent round trips fed by
// the gateway (as its gateway.Observer), counters of refused requests, and
// the requester's, gateway's and broker's own counters read at scrape time,
// so that the hot path pays for a histogram observation and nothing else.
package metrics

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/requester"
)

// Namespace prefixes every metric name.
const Namespace = "toolbus"

// RequesterStats is the expert-agent requester (*requester.Requester).
type RequesterStats interface {
	Stats() requester.Stats
	Agents() []requester.AgentStatus
}

// GatewayStats is the MCP endpoint (*gateway.Gateway).
type GatewayStats interface {
	Stats() gateway.Stats
}

// BrokerStats is the embedded broker (*broker.Broker).
type BrokerStats interface {
	Stats() broker.Stats
}

// Options says where the scrape-time counters come from. A nil source is
// left out of the metrics (the broker, with an external one).
type Options struct {
	Requester RequesterStats
	Gateway   GatewayStats
	Broker    BrokerStats
	// Gauges are extra values read at scrape time, by metric name (without
	// the namespace), e.g. the audit log's queue depth.
	Gauges map[string]GaugeFunc
}

// GaugeFunc is a gauge read at scrape time, with its help text.
type GaugeFunc struct {
	Help  string
	Value func() float64
}

// Metrics is a process's Prometheus registry. It is a gateway.Observer.
type Metrics struct {
	reg *prometheus.Registry

	toolCalls     *prometheus.HistogramVec
	requests      *prometheus.HistogramVec
	agentRequests *prometheus.HistogramVec
	refused       *prometheus.CounterVec
	reloads       *prometheus.CounterVec
}

var _ gateway.Observer = (*Metrics)(nil)

// latencyBuckets span a fast platform call (tens of µs) to an expert-agent
// call at its deadline (30 s by default).
var latencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// New builds the registry: the Go runtime and process collectors, the
// histograms the Observer methods feed, and the scrape-time counters of
// opts.
func New(opts Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.toolCalls = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "tool_call_duration_seconds",
		Help:    "Time from a tools/call's tool lookup to its answer, by tool source (platform, agent, or none when not found) and outcome (ok, tool_error, timeout, refused, error, cancelled).",
		Buckets: latencyBuckets,
	}, []string{"source", "outcome"})
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "mcp_request_duration_seconds",
		Help:    "Time to answer an MCP request, by JSON-RPC method (methods the gateway does not serve are \"other\").",
		Buckets: latencyBuckets,
	}, []string{"method"})
	m.agentRequests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "agent_request_duration_seconds",
		Help:    "Round trip of a request to the expert agents over MQTT (input rounds included), by method and outcome (ok, timeout, error).",
		Buckets: latencyBuckets,
	}, []string{"method", "outcome"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "refused_requests_total",
		Help: "Requests refused before they ran, by reason (unauthenticated, forbidden, body_too_large, rate_limited, ...).",
	}, []string{"reason"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "config_reloads_total",
		Help: "Reloads of the settings (SIGHUP), by result (ok, error: the running settings stayed).",
	}, []string{"result"})
	m.reg.MustRegister(m.toolCalls, m.requests, m.agentRequests, m.refused, m.reloads,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: Namespace}),
		&statsCollector{opts: opts},
	)
	return m
}

// Handler serves the metrics in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the underlying registry, for tests and for other collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Reloaded counts one reload of the settings and its result.
func (m *Metrics) Reloaded(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.reloads.WithLabelValues(result).Inc()
}

// ToolCall implements gateway.Observer.
func (m *Metrics) ToolCall(tc *gateway.ToolCall) {
	m.toolCalls.WithLabelValues(tc.Source, tc.Outcome).Observe(tc.Duration.Seconds())
}

// Refused implements gateway.Observer.
func (m *Metrics) Refused(_ *http.Request, _ int, reason string) {
	m.refused.WithLabelValues(reason).Inc()
}

// Request implements gateway.Observer.
func (m *Metrics) Request(method string, d time.Duration) {
	m.requests.WithLabelValues(method).Observe(d.Seconds())
}

// AgentRequest implements gateway.Observer.
func (m *Metrics) AgentRequest(method string, d time.Duration, err error) {
	outcome := "ok"
	switch {
	case errors.Is(err, requester.ErrTimeout):
		outcome = "timeout"
	case err != nil:
		outcome = "error"
	}
	m.agentRequests.WithLabelValues(method, outcome).Observe(d.Seconds())
}
