package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// scrape reads /metrics with token and parses the text format.
func scrape(t *testing.T, e *gwEnv, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, e.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// metricValue is the value of the series of family name whose labels
// include want (a histogram's sample count, a counter's or gauge's value);
// -1 when there is no such series.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := fams[name]
	if !ok {
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
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestMetrics: /metrics is refused without the admin or metrics scope,
// parses with Prometheus's own parser, and moves when calls are made.
func TestMetrics(t *testing.T) {
	e := startGateway(t, server.Config{})
	scraper := e.token(t, store.TokenSpec{UserID: "prom", Scopes: []string{store.ScopeMetrics}})
	caller := e.token(t, store.TokenSpec{UserID: "alice"})

	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"bad token", "tb_nope_nope", http.StatusUnauthorized},
		{"tools scopes only", caller, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, e.base+"/metrics", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("GET /metrics: %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}

	before := scrape(t, e, scraper)
	agentOK := map[string]string{"source": "agent", "outcome": "ok"}
	platformOK := map[string]string{"source": "platform", "outcome": "ok"}
	unknown := map[string]string{"outcome": "refused"}
	count := func(fams map[string]*dto.MetricFamily, labels map[string]string) float64 {
		return max(metricValue(fams, "toolbus_tool_call_duration_seconds", labels), 0)
	}

	cs := e.connect(t, e.mcpURL(), caller, "2025-11-25", nil)
	ctx := testCtx(t, 20*time.Second)
	for _, name := range []string{"echo", "platform_echo"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "hi"}})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}}); err == nil {
		t.Fatal("unknown tool: no error")
	}

	after := scrape(t, e, scraper)
	for _, c := range []struct {
		what   string
		labels map[string]string
	}{{"agent ok", agentOK}, {"platform ok", platformOK}, {"unknown tool refused", unknown}} {
		if d := count(after, c.labels) - count(before, c.labels); d != 1 {
			t.Errorf("%s: tool_call_duration_seconds count moved by %v, want 1", c.what, d)
		}
	}
	if d := metricValue(after, "toolbus_refused_requests_total", map[string]string{"reason": "unauthenticated"}); d < 2 {
		t.Errorf("refused_requests_total{reason=unauthenticated} = %v, want >= 2", d)
	}
	if v := metricValue(after, "toolbus_agent_request_duration_seconds", map[string]string{"method": "tools/call", "outcome": "ok"}); v < 1 {
		t.Errorf("agent_request_duration_seconds{tools/call,ok} count = %v, want >= 1", v)
	}
	if v := metricValue(after, "toolbus_mcp_request_duration_seconds", map[string]string{"method": "tools/call"}); v < 3 {
		t.Errorf("mcp_request_duration_seconds{tools/call} count = %v, want >= 3", v)
	}
	for name, least := range map[string]float64{
		"toolbus_agents_online": 1, "toolbus_contexts": 1, "toolbus_mcp_sessions": 1, "toolbus_broker_clients": 1,
		"toolbus_context_cache_hits_total": 1, "toolbus_broker_messages_received_total": 1,
	} {
		if v := metricValue(after, name, nil); v < least {
			t.Errorf("%s = %v, want >= %v", name, v, least)
		}
	}
	if v := metricValue(after, "toolbus_pending_calls", nil); v != 0 {
		t.Errorf("toolbus_pending_calls = %v, want 0", v)
	}
}
