package integration

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/bridge"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The cost of the bridge: one go-sdk client session's sequential calls of
// a trivial tool (add) of a go-sdk Streamable HTTP server, made directly
// (the baseline) and through gateway, broker and bridge, in one run:
//
//	go test ./integration/ -run '^$' -bench BenchmarkBridgeCall -benchtime 2000x
func BenchmarkBridgeCall(b *testing.B) {
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newUpstream(nil) }, nil))
	b.Cleanup(hs.Close)
	srv := startServer(b, server.Config{Logger: benchLogger(b)})
	startBridge(b, srv, "files", "files-1", bridge.Options{URL: hs.URL, Logger: benchLogger(b)})
	secret, _, err := srv.Store().CreateToken(testCtx(b, 5*time.Second), store.TokenSpec{UserID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		url  string
		hc   *http.Client
	}{
		{"direct", hs.URL, http.DefaultClient},
		{"bridge", "http://" + srv.HTTPAddr().String() + "/api/v1/mcp", &http.Client{Transport: bearerTransport{secret}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
			cs, err := c.Connect(testCtx(b, 15*time.Second), &mcp.StreamableClientTransport{Endpoint: tc.url, HTTPClient: tc.hc},
				&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = cs.Close() })
			ctx := testCtx(b, 10*time.Minute)
			args := map[string]any{"a": 2, "b": 40}
			for b.Loop() {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: args})
				if err != nil || res.IsError {
					b.Fatalf("add: %+v, %v", res, err)
				}
			}
		})
	}
}
