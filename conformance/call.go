package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
)

// toolFunc runs one fixture tool. It returns a *mcp.CallToolResult, or
// an *inputRequired asking the client for input; a *jsonrpc.Error is
// answered as is, any other error as an isError result.
type toolFunc func(ctx context.Context, req *expertagent.CallRequest, x *exchange) (any, error)

// fixtureTool is a tool as the Agent lists it, and how the fixture runs it.
type fixtureTool struct {
	tool expertagent.Tool
	run  toolFunc
}

// readOnly is the annotation of every fixture tool: none changes anything,
// so read-only tokens may call them all.
var readOnly = &mcp.ToolAnnotations{ReadOnlyHint: new(true)}

// newTool makes a fixture tool; schema "" means no arguments.
func (f *fixture) newTool(name, description, schema string, run toolFunc) *fixtureTool {
	if schema == "" {
		schema = `{"type":"object","properties":{}}`
	}
	t := &fixtureTool{run: run, tool: expertagent.Tool{
		Tool: mcp.Tool{
			Name:        name,
			Description: description,
			InputSchema: json.RawMessage(schema),
			Annotations: readOnly,
		},
	}}
	t.tool.Handler = f.agentHandler(t)
	return t
}

// callResultWire is a complete tools/call result.
type callResultWire struct {
	Content           []mcp.Content `json:"content"`
	StructuredContent any           `json:"structuredContent,omitempty"`
	IsError           bool          `json:"isError,omitempty"`
}

func wireResult(r *mcp.CallToolResult) *callResultWire {
	w := &callResultWire{Content: r.Content, StructuredContent: r.StructuredContent, IsError: r.IsError}
	if w.Content == nil {
		w.Content = []mcp.Content{}
	}
	return w
}

// callTool serves tools/call for every fixture tool (registered with
// Agent.Handle): an unknown tool or malformed params are -32602, a forged
// requestState too; what the tool does is a result.
func (f *fixture) callTool(ctx context.Context, req *expertagent.MethodRequest) (any, error) {
	var p requestParams
	if err := decodeParams(methodToolsCall, req.Params, &p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "tools/call: params.name is required")
	}
	t := f.tools[p.Name]
	if t == nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown tool: %q", p.Name)
	}
	out, err := f.invoke(ctx, t, req, &p)
	if err != nil {
		return nil, err
	}
	if r, ok := out.(*mcp.CallToolResult); ok {
		return wireResult(r), nil
	}
	return out, nil
}

// invoke checks the arguments and the MRTR members and runs t. It returns
// a *mcp.CallToolResult or an *inputRequired, or a *jsonrpc.Error.
func (f *fixture) invoke(ctx context.Context, t *fixtureTool, req *expertagent.MethodRequest, p *requestParams) (any, error) {
	args := bytes.TrimSpace(p.Arguments)
	if bytes.Equal(args, []byte("null")) {
		args = nil
	}
	if len(args) > 0 && args[0] != '{' {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "tools/call %s: arguments must be a JSON object", p.Name)
	}
	x, err := f.newExchange(req, methodToolsCall, p.Name, p)
	if err != nil {
		return nil, err
	}
	// A CallRequest copied from the MethodRequest keeps its tie to the call,
	// so that Progress and Log reach the caller.
	cr := &expertagent.CallRequest{MethodRequest: *req, Name: p.Name, Arguments: args}
	out, err := t.run(ctx, cr, x)
	if err != nil {
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			return nil, rpcErr
		}
		return mcp.ErrorResult("%s", err.Error()), nil
	}
	if out == nil {
		return &mcp.CallToolResult{}, nil
	}
	return out, nil
}

// agentHandler is the ToolHandler t is added with. Register's tools/call
// handler takes precedence over the Agent's, so this runs only for an
// Agent without it; it serves complete results and refuses to ask for
// input, which a ToolHandler cannot express.
func (f *fixture) agentHandler(t *fixtureTool) expertagent.ToolHandler {
	return func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
		var p requestParams
		if err := decodeParams(methodToolsCall, req.Params, &p); err != nil {
			return nil, err
		}
		p.Name, p.Arguments = req.Name, req.Arguments
		out, err := f.invoke(ctx, t, &req.MethodRequest, &p)
		if err != nil {
			return nil, err
		}
		if r, ok := out.(*mcp.CallToolResult); ok {
			return r, nil
		}
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "tool %q needs input from the client, which only the conformance fixture's own tools/call handler can ask for", t.tool.Name)
	}
}

// pause waits StepDelay, or until ctx is done.
func (f *fixture) pause(ctx context.Context) error {
	t := time.NewTimer(f.opts.StepDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
