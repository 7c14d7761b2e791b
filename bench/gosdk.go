package bench

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// GoSDKOptions configure the go-sdk baseline.
type GoSDKOptions struct {
	ServerOptions
	// Stateless serves every request with a temporary session (no
	// Mcp-Session-Id), the mode the 2026-07-28 wire is meant for; false
	// keeps a session per initialize.
	Stateless bool
}

// GoSDKServer is the echo tool on the official
// github.com/modelcontextprotocol/go-sdk server and its Streamable HTTP
// handler with default options (SSE responses, typed tool handler with
// input validation), stateful or stateless.
type GoSDKServer struct {
	httpServer
	opts GoSDKOptions
}

type echoInput struct {
	Text string `json:"text" jsonschema:"the text to return"`
}

// NewGoSDKServer returns the go-sdk baseline, not started.
func NewGoSDKServer(opts GoSDKOptions) *GoSDKServer {
	name := "bench-go-sdk"
	if opts.Stateless {
		name += "-stateless"
	}
	opts.ServerOptions = opts.withDefaults(name)
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ServerOptions{
		Logger: slog.New(slog.DiscardHandler),
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        EchoTool,
		Description: "Returns its text argument.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in echoInput) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Stateless:           opts.Stateless,
		MaxRequestBodyBytes: opts.MaxBodyBytes,
		Logger:              slog.New(slog.DiscardHandler),
	})
	g := &GoSDKServer{opts: opts}
	g.httpServer = httpServer{log: opts.Logger, handler: h}
	return g
}

// Start listens on opts.Addr.
func (g *GoSDKServer) Start(ctx context.Context) error { return g.start(ctx, g.opts.Addr) }
