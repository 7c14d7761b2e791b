package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestAgentRateLimit: an operator limits agent tagent to 60 calls a
// minute, 5 at once, through the admin API, and the running gateway
// enforces it at once across callers: of quick calls from two go-sdk
// clients with different tokens (and users), the sixth gets 429 with
// Retry-After and the JSON-RPC error -32029 naming the agent. Another
// agent and the platform tools are not held back; lifting the limit lets
// calls through at once.
func TestAgentRateLimit(t *testing.T) {
	e := startGateway(t, server.Config{Audit: server.AuditConfig{FlushInterval: 50 * time.Millisecond}})
	startTestAgent(t, e.srv, "other")
	adm, err := admin.NewClient(e.base, e.token(t, store.TokenSpec{UserID: "ops", Scopes: []string{store.ScopeAdmin, store.ScopeToolsList}}), admin.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := adm.SetAgentLimit(testCtx(t, 10*time.Second), "tagent", admin.AgentLimitRequest{Limit: "60:5"})
	if err != nil || got != (admin.AgentLimit{Agent: "tagent", Limit: "60:5", Rate: "60/min burst 5"}) {
		t.Fatalf("SetAgentLimit = %+v, %v", got, err)
	}
	if all, err := adm.AgentLimits(testCtx(t, 10*time.Second)); err != nil || len(all) != 1 || all[0] != got {
		t.Fatalf("AgentLimits = %+v, %v", all, err)
	}

	tokA, tokB := e.token(t, store.TokenSpec{UserID: "ann"}), e.token(t, store.TokenSpec{UserID: "bob"})
	clients := []*mcp.ClientSession{
		e.connect(t, e.mcpURL(), tokA, "2025-11-25", nil),
		e.connect(t, e.mcpURL(), tokB, "2025-11-25", nil),
	}
	// Both agents serve echo: the union qualifies one of the names.
	ags, err := adm.Agents(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var limited, free string
	for _, tool := range ags.Tools {
		if tool.Name == "echo" || tool.Served == "echo" {
			switch tool.Agent {
			case "tagent":
				limited = tool.Name
			case "other":
				free = tool.Name
			}
		}
	}
	if limited == "" || free == "" {
		t.Fatalf("tools %+v, want echo of tagent and of other", ags.Tools)
	}
	call := func(cs *mcp.ClientSession, tool string) error {
		_, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "x"}})
		return err
	}

	// The sixth quick call is refused. Each second refills one call: a
	// run slower than that may pass one more per second it took.
	start := time.Now()
	refusedAt := 0
	for i := 1; i <= 12 && refusedAt == 0; i++ {
		if err := call(clients[i%2], limited); err != nil {
			if !strings.Contains(strings.ToLower(err.Error()), "too many requests") {
				t.Fatalf("call %d: %v, want a rate-limit error", i, err)
			}
			refusedAt = i
		}
	}
	if extra := int(time.Since(start) / time.Second); refusedAt < 6 || refusedAt > 6+extra {
		t.Fatalf("refused at call %d (in %v), want the sixth", refusedAt, time.Since(start))
	}

	// The answer itself: 429, Retry-After, the JSON-RPC error.
	var a answer
	for range 10 {
		if a = rawCall(t, e, tokB, limited); a.status == http.StatusTooManyRequests {
			break
		}
	}
	checkLimited(t, a)
	if !strings.Contains(string(a.body), "rate limit of agent tagent reached") {
		t.Errorf("429 body %s, want it to name the agent's limit", a.body)
	}
	// Not held back: the other agent, the platform tools.
	for _, tool := range []string{free, free, free, "platform_echo"} {
		if a := rawCall(t, e, tokB, tool); a.status != http.StatusOK {
			t.Fatalf("%s while tagent is limited: status %d, body %s", tool, a.status, a.body)
		}
	}

	// Lifting the limit applies at once: more quick calls than any refill.
	if _, err := adm.SetAgentLimit(testCtx(t, 10*time.Second), "tagent", admin.AgentLimitRequest{Limit: ""}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if a := rawCall(t, e, tokA, limited); a.status != http.StatusOK {
			t.Fatalf("call %d after the limit was lifted: status %d, body %s", i+1, a.status, a.body)
		}
	}

	// Audited: the two changes, and the refused calls with the agent.
	changes := waitAudit(t, e.srv.Store(), "agent.limit changes", store.AuditQuery{Kind: store.AuditAdmin}, 2)
	if c := changes[1]; c.Action != "agent.limit" || c.Target != "agent tagent limit 60:5" || c.UserID != "ops" {
		t.Errorf("first admin change %+v, want ops's agent.limit of tagent 60:5", c)
	}
	if c := changes[0]; c.Action != "agent.limit" || c.Target != "agent tagent limit none" {
		t.Errorf("second admin change %+v, want agent.limit of tagent none", c)
	}
	refused := waitAudit(t, e.srv.Store(), "refused calls", store.AuditQuery{Kind: store.AuditToolCall, Outcome: "refused"}, 2)
	for _, r := range refused {
		if r.Reason != "rate_limited" || r.Agent != "tagent" {
			t.Errorf("refused call %+v, want rate_limited, agent tagent", r)
		}
	}
}
