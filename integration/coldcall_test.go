package integration

import (
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestColdContextCall: the first call in a new context asks the agents for
// their tool list only when no context has it yet, or when the check needs
// the context's own list (a read-only token, an unknown name); a name no
// agent listed never reaches them.
func TestColdContextCall(t *testing.T) {
	e := startGateway(t, server.Config{})
	scraper := e.token(t, store.TokenSpec{UserID: "prom", Scopes: []string{store.ScopeMetrics}})
	lists := func() float64 {
		return max(metricValue(scrape(t, e, scraper), "toolbus_agent_request_duration_seconds", map[string]string{"method": "tools/list"}), 0)
	}
	call := func(token, tool string) (*mcp.CallToolResult, error) {
		cs := e.connect(t, e.mcpURL(), token, "2025-11-25", nil) // a new session: a new context
		return cs.CallTool(testCtx(t, 20*time.Second), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hi"}})
	}
	alice := e.token(t, store.TokenSpec{UserID: "alice"})
	readOnly := e.token(t, store.TokenSpec{UserID: "rob", ReadOnly: true})

	steps := []struct {
		what      string
		token     string
		tool      string
		wantLists float64 // tools/list requests it makes
		wantErr   bool
	}{
		{"first context ever", alice, "echo", 1, false},
		{"a new context, tool known from another", alice, "echo", 0, false},
		{"a new context, read-only token", readOnly, "echo", 1, false},
		{"a new context, a name no agent listed", alice, "nope", 1, true},
	}
	for _, s := range steps {
		before := lists()
		var res *mcp.CallToolResult
		var err error
		if s.wantErr {
			e.spy.quiet(t, s.what, func() { res, err = call(s.token, s.tool) })
			if err == nil {
				t.Fatalf("%s: no error (%+v)", s.what, res)
			}
		} else if res, err = call(s.token, s.tool); err != nil || res.IsError || textOf(t, res) != "hi" {
			t.Fatalf("%s: %v %+v", s.what, err, res)
		}
		if d := lists() - before; d != s.wantLists {
			t.Errorf("%s: %v tools/list requests, want %v", s.what, d, s.wantLists)
		}
	}
}
