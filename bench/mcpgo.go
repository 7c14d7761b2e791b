package bench

import (
	"context"
	"log/slog"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// MCPGoServer is the echo tool on github.com/mark3labs/mcp-go's Streamable
// HTTP server with its default options (what a user gets from
// server.NewStreamableHTTPServer: generated session ids without server-side
// session state, JSON responses unless a handler sends notifications).
type MCPGoServer struct {
	httpServer
	opts ServerOptions
}

// NewMCPGoServer returns the mcp-go baseline, not started.
func NewMCPGoServer(opts ServerOptions) *MCPGoServer {
	opts = opts.withDefaults("bench-mcp-go")
	s := server.NewMCPServer("bench-mcp-go", "1", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool(EchoTool,
		mcp.WithDescription("Returns its text argument."),
		mcp.WithString("text", mcp.Required()),
		mcp.WithReadOnlyHintAnnotation(true),
	), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		text, err := req.RequireString("text")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return mcp.NewToolResultText(text), nil
	})
	h := server.NewStreamableHTTPServer(s,
		server.WithStreamableHTTPLogger(slog.New(slog.DiscardHandler)),
	)
	m := &MCPGoServer{opts: opts}
	m.httpServer = httpServer{log: opts.Logger, handler: h}
	return m
}

// Start listens on opts.Addr.
func (m *MCPGoServer) Start(ctx context.Context) error { return m.start(ctx, m.opts.Addr) }
