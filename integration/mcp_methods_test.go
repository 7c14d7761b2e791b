package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	tbmcp "github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestMCPPromptsAndResources: prompts and resources come from the expert
// agent through the same contexts and scopes as tools, at every version.
func TestMCPPromptsAndResources(t *testing.T) {
	e := startGateway(t, server.Config{})
	tok := e.token(t, store.TokenSpec{UserID: "judy"})
	for _, v := range protocolVersions {
		t.Run(v, func(t *testing.T) {
			cs := e.connect(t, e.mcpURL(), tok, v, nil)
			ctx := testCtx(t, 20*time.Second)

			pl, err := cs.ListPrompts(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(pl.Prompts) != 1 || pl.Prompts[0].Name != "greet" {
				t.Fatalf("prompts: %+v", pl.Prompts)
			}
			pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "Ann"}})
			if err != nil {
				t.Fatal(err)
			}
			if tc, ok := pr.Messages[0].Content.(*mcp.TextContent); !ok || tc.Text != "Say hello to Ann." {
				t.Fatalf("prompt: %+v", pr.Messages[0].Content)
			}

			rl, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rl.Resources) != 1 || rl.Resources[0].URI != "test://note" {
				t.Fatalf("resources: %+v", rl.Resources)
			}
			rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://note"})
			if err != nil {
				t.Fatal(err)
			}
			if len(rr.Contents) != 1 || rr.Contents[0].Text != "a note for judy" {
				t.Fatalf("read: %+v", rr.Contents)
			}
			if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://missing"}); err == nil || !strings.Contains(err.Error(), "no such resource") {
				t.Fatalf("missing resource: err = %v", err)
			}
		})
	}

	t.Run("list-only token cannot read", func(t *testing.T) {
		cs := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "judy", Scopes: []string{store.ScopeToolsList}}), "2025-11-25", nil)
		if _, err := cs.ReadResource(testCtx(t, 10*time.Second), &mcp.ReadResourceParams{URI: "test://note"}); err == nil {
			t.Fatal("a token without tools:call read a resource")
		}
	})
}

// TestMCPCancellation: a client that cancels a call (legacy: a
// notifications/cancelled on another POST; 2026: closing the stream) stops
// the agent's work.
func TestMCPCancellation(t *testing.T) {
	e := startGateway(t, server.Config{})
	tok := e.token(t, store.TokenSpec{UserID: "ken"})
	for _, v := range protocolVersions {
		t.Run(v, func(t *testing.T) {
			cs := e.connect(t, e.mcpURL(), tok, v, nil)
			for len(cancelled) > 0 || len(waitStarted) > 0 {
				select {
				case <-cancelled:
				case <-waitStarted:
				}
			}
			ctx, cancel := context.WithCancel(testCtx(t, 20*time.Second))
			done := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait_cancel", Arguments: map[string]any{}})
				done <- err
			}()
			select {
			case <-waitStarted:
			case <-time.After(10 * time.Second):
				t.Fatal("the agent's tool did not start")
			}
			cancel()
			select {
			case <-cancelled:
			case <-time.After(10 * time.Second):
				t.Fatal("the agent's tool was not cancelled")
			}
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Logf("client error after cancel: %v", err)
			}
		})
	}
}

// TestMCPToolsPagination: 5 000 agent tools come back in pages that the
// official client follows, each tool once, in a stable order.
func TestMCPToolsPagination(t *testing.T) {
	const n = 5000 // past the default --max-agent-tools: raised for this agent
	srv := startServer(t, server.Config{ListTimeout: 20 * time.Second, MaxAgentTools: n})
	ctx := testCtx(t, 60*time.Second)
	if _, err := srv.Store().AddIdentity(ctx, "many", acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: "many", Password: agentPassword,
		ClientID: "many-1", Name: "many", Logger: testLogger(t).WithField("component", "agent"),
	})
	for i := range n {
		if err := a.AddTool(expertagent.Tool{
			Tool: tbmcp.Tool{
				Name:        fmt.Sprintf("tool_%04d", i),
				Description: "One of many.",
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
				return tbmcp.TextResult("ok"), nil
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	poll(t, 15*time.Second, "agent online", func() bool { return agentOnline(srv, "many-1") })

	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	tok := e.token(t, store.TokenSpec{UserID: "lists"})
	for _, v := range protocolVersions {
		t.Run(v, func(t *testing.T) {
			cs := e.connect(t, e.mcpURL(), tok, v, nil)
			first, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if first.NextCursor == "" || len(first.Tools) >= n {
				t.Fatalf("first page: %d tools, nextCursor %q", len(first.Tools), first.NextCursor)
			}
			seen := map[string]bool{}
			var prev string
			for tl, err := range cs.Tools(ctx, nil) {
				if err != nil {
					t.Fatal(err)
				}
				if seen[tl.Name] {
					t.Fatalf("%s listed twice", tl.Name)
				}
				seen[tl.Name] = true
				if strings.HasPrefix(tl.Name, "tool_") && tl.Name < prev {
					t.Fatalf("order: %s after %s", tl.Name, prev)
				}
				if strings.HasPrefix(tl.Name, "tool_") {
					prev = tl.Name
				}
			}
			if got := len(seen); got != n+len(platformToolNames) {
				t.Fatalf("%d tools listed, want %d", got, n+len(platformToolNames))
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tool_4999", Arguments: map[string]any{}})
			if err != nil || res.IsError {
				t.Fatalf("call of the last tool: %v %+v", err, res)
			}
		})
	}
	if _, err := e.rawList(t, tok, "bm90LWEtY3Vyc29y"); err == nil {
		t.Fatal("a forged cursor was accepted")
	}
}

// rawList sends a legacy tools/list with a cursor on a fresh session and
// returns the JSON-RPC error, if any.
func (e *gwEnv) rawList(t *testing.T, tok, cursor string) (json.RawMessage, error) {
	t.Helper()
	resp, _ := rawPost(t, e.mcpURL(), tok, initBody, nil)
	sid := resp.Header.Get("Mcp-Session-Id")
	_, body := rawPost(t, e.mcpURL(), tok, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"`+cursor+`"}}`,
		map[string]string{"Mcp-Session-Id": sid})
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if m.Error != nil {
		return nil, fmt.Errorf("%d: %s", m.Error.Code, m.Error.Message)
	}
	return m.Result, nil
}
