package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/server"
)

// TestMCPPromptsAndResources: prompts and resources come from the expert
// agent through the same contexts and scopes as tools, at every version.
func TestMCPPromptsAndResources(t *testing.T) {
	e := startGateway(t, server.Config{})
	tok := e.token(t, acl.TokenSpec{UserID: "judy"})
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
		cs := e.connect(t, e.mcpURL(), e.token(t, acl.TokenSpec{UserID: "judy", Scopes: []string{acl.ScopeToolsList}}), "2025-11-25", nil)
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
	tok := e.token(t, acl.TokenSpec{UserID: "ken"})
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
