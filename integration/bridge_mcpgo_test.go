package integration

import (
	"context"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/bridge"
	"github.com/toolbus/toolbus/server"
)

// logMessages collects the messages a logger writes.
type logMessages struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logMessages) Levels() []logrus.Level { return logrus.AllLevels }

func (h *logMessages) Fire(e *logrus.Entry) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, e.Message)
	h.mu.Unlock()
	return nil
}

func (h *logMessages) has(msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.msgs, msg)
}

// An mcp-go server speaks 2026-07-28 to the bridge, and refuses a message
// without its protocol version in _meta with HTTP 400. A call cancelled by
// its caller is cancelled upstream too, and the bridge's session to the
// server lives on.
func TestBridgeMCPGoUpstreamCancel(t *testing.T) {
	started, cancelled := make(chan struct{}, 1), make(chan struct{}, 1)
	s := mcpgoserver.NewMCPServer("mcp-go-upstream", "1", mcpgoserver.WithToolCapabilities(false))
	s.AddTool(mcpgo.NewTool("block", mcpgo.WithDescription("Waits until cancelled.")),
		func(ctx context.Context, _ mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			started <- struct{}{}
			<-ctx.Done()
			cancelled <- struct{}{}
			return nil, ctx.Err()
		})
	s.AddTool(mcpgo.NewTool("hello", mcpgo.WithDescription("Says hello.")),
		func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("hello"), nil
		})
	hs := httptest.NewServer(mcpgoserver.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)

	srv := startServer(t, server.Config{})
	log := testLogger(t)
	msgs := &logMessages{}
	log.Logger.AddHook(msgs)
	startBridge(t, srv, "mcpgo", "mcpgo-1", bridge.Options{URL: hs.URL, Logger: log})
	if !msgs.has("upstream initialized; serving it on the bus") {
		t.Fatal("no upstream session")
	}
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	c := connectBridgeClient(t, e, "2025-11-25", "hal")

	ctx, cancel := context.WithCancel(testCtx(t, 20*time.Second))
	done := make(chan error, 1)
	go func() {
		_, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "block"})
		done <- err
	}()
	waitFor(t, started, "block running upstream")
	cancel()
	waitFor(t, cancelled, "the cancellation reached mcp-go")
	<-done
	if got := c.callText(t, "hello", nil); got != "hello" {
		t.Errorf("hello = %q", got)
	}
	if msgs.has("upstream ended") {
		t.Error("the cancellation ended the bridge's session to mcp-go")
	}
}
