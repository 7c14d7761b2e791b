package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/bridge"
)

// upstreamEnv, when set, makes the test binary the stdio MCP server that
// a bridge in a test starts (see TestMain).
const upstreamEnv = "TOOLBUS_IT_UPSTREAM"

// upstreamHooks let an in-process upstream tell the test what happened.
type upstreamHooks struct {
	blockStarted   chan struct{} // a "block" call began
	blockCancelled chan struct{} // a "block" call saw its context end
}

// newUpstream is the MCP server the bridge tests put on the bus, built
// with the official go-sdk: tools that add, say who called, report their
// process, send progress, ask the client (sampling, then elicitation, the
// pre-2026 way: requests during the call) and block until cancelled; a
// resource and a prompt. hooks may be nil.
func newUpstream(hooks *upstreamHooks) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "it-upstream", Version: "1.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Adds two integers.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			A int64 `json:"a"`
			B int64 `json:"b"`
		}) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprintf("%d+%d=%d", in.A, in.B, in.A+in.B)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Says who the gateway says is calling."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			b, _ := json.Marshal(req.Params.Meta[bridge.CallerMetaKey])
			return text(string(b)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "The upstream's process ID."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			fmt.Fprintln(os.Stderr, "pid asked") // the bridge logs the upstream's stderr
			return text(strconv.Itoa(os.Getpid())), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Reports three steps of progress."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i := 1; i <= 3; i++ {
					if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3, Message: "step " + strconv.Itoa(i)}); err != nil {
						return nil, nil, err
					}
				}
			}
			return text("slow done"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Description: "Asks the client's model, then its user."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			m, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 16,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "What is six times seven?"}}}})
			if err != nil {
				return nil, nil, fmt.Errorf("sampling: %w", err)
			}
			e, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []string{"name"}}})
			if err != nil {
				return nil, nil, fmt.Errorf("elicitation: %w", err)
			}
			said := ""
			if tc, ok := m.Content.(*mcp.TextContent); ok {
				said = tc.Text
			}
			return text(fmt.Sprintf("model said %s; %s is %v", said, e.Action, e.Content["name"])), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "roots", Description: "Lists the client's roots."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			r, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return nil, nil, fmt.Errorf("roots: %w", err)
			}
			var uris []string
			for _, root := range r.Roots {
				uris = append(uris, root.URI)
			}
			return text(strings.Join(uris, ",")), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "block", Description: "Waits until cancelled."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			// Progress says the call runs, to a test in another process too.
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "blocking"})
			}
			if hooks != nil {
				hooks.blockStarted <- struct{}{}
			}
			<-ctx.Done()
			if hooks != nil {
				hooks.blockCancelled <- struct{}{}
			}
			return nil, nil, ctx.Err()
		})
	s.AddResource(&mcp.Resource{URI: "mem://note", Name: "note", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "a note"}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "name", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Hello " + req.Params.Arguments["name"]}}}}, nil
		})
	return s
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// runStdioUpstream serves newUpstream on stdin/stdout until stdin closes.
func runStdioUpstream() int {
	fmt.Fprintln(os.Stderr, "upstream starting")
	if err := newUpstream(nil).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "upstream:", err)
		return 1
	}
	return 0
}
