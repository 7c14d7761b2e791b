package metrics_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/requester"
)

// TestObserverFeedsMetrics: what the gateway reports shows in the
// exposition, labelled as documented; gauges of Options are read at scrape.
func TestObserverFeedsMetrics(t *testing.T) {
	depth := 0.0
	m := metrics.New(metrics.Options{Gauges: map[string]metrics.GaugeFunc{
		"audit_queue_depth": {Help: "records waiting", Value: func() float64 { return depth }},
	}})
	m.ToolCall(&gateway.ToolCall{Source: gateway.SourceAgent, Outcome: gateway.OutcomeOK, Duration: 3 * time.Millisecond})
	m.ToolCall(&gateway.ToolCall{Source: gateway.SourcePlatform, Outcome: gateway.OutcomeToolError, Duration: time.Millisecond})
	m.Refused(httptest.NewRequest("GET", "/", nil), 401, "unauthenticated")
	m.Request("tools/call", 2*time.Millisecond)
	m.AgentRequest("tools/call", time.Millisecond, nil)
	m.AgentRequest("tools/call", time.Second, requester.ErrTimeout)
	m.AgentRequest("tools/list", time.Millisecond, errors.New("no"))
	m.Reloaded(nil)
	depth = 7

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`toolbus_tool_call_duration_seconds_count{outcome="ok",source="agent"} 1`,
		`toolbus_tool_call_duration_seconds_count{outcome="tool_error",source="platform"} 1`,
		`toolbus_refused_requests_total{reason="unauthenticated"} 1`,
		`toolbus_mcp_request_duration_seconds_count{method="tools/call"} 1`,
		`toolbus_agent_request_duration_seconds_count{method="tools/call",outcome="ok"} 1`,
		`toolbus_agent_request_duration_seconds_count{method="tools/call",outcome="timeout"} 1`,
		`toolbus_agent_request_duration_seconds_count{method="tools/list",outcome="error"} 1`,
		`toolbus_config_reloads_total{result="ok"} 1`,
		`toolbus_audit_queue_depth 7`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

type gatewayStats gateway.Stats

func (g gatewayStats) Stats() gateway.Stats { return gateway.Stats(g) }

// TestGatewayCountersExposed: what the gateway left out of agents' tool
// lists shows by reason, with the lists it fetched.
func TestGatewayCountersExposed(t *testing.T) {
	m := metrics.New(metrics.Options{Gateway: gatewayStats{
		Sessions: 2, AgentListsFetched: 9,
		AgentToolsLeftOut: map[string]uint64{gateway.LeftOutInvalidName: 20000, gateway.LeftOutTooMany: 3},
	}})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`toolbus_mcp_sessions 2`,
		`toolbus_agent_tool_lists_fetched_total 9`,
		`toolbus_agent_tools_left_out_total{reason="invalid_name"} 20000`,
		`toolbus_agent_tools_left_out_total{reason="too_many"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}
