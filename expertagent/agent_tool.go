package expertagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolbus/toolbus/mcp"
)

// ErrInvalidTool is returned by AddTool for a tool that cannot be listed:
// no name, a name MCP does not allow, no handler, or a schema that is not a
// JSON object schema. It is mcp.ErrInvalidTool.
var ErrInvalidTool = mcp.ErrInvalidTool

// ErrDuplicateTool is returned by AddTool for a second tool with the same name.
var ErrDuplicateTool = errors.New("duplicate tool name")

// Tool is one tool an Agent serves: its definition, listed to callers
// exactly as MCP's tools/list defines it, and the handler that runs it.
// The gateway lets a read-only token call only tools annotated
// ReadOnlyHint true, and the Agent checks the same again.
type Tool struct {
	mcp.Tool
	// Handler runs a call. Required.
	Handler ToolHandler

	// required is InputSchema's top-level "required" (set by AddTool),
	// which CallRequest.Bind checks.
	required []string
}

// ToolHandler runs one tools/call. ctx ends at the deadline the gateway set
// for the call, when the caller cancels it (notifications/cancelled), or when
// the Agent stops. An error becomes a result with isError true and the
// error's text, so the model can read what went wrong; return a
// *jsonrpc.Error instead to answer with a JSON-RPC error.
type ToolHandler func(ctx context.Context, req *CallRequest) (*mcp.CallToolResult, error)

// validate checks what MCP requires of a listed tool, and the handler,
// and keeps the inputSchema's required properties for Bind.
func (t *Tool) validate() error {
	if err := t.Tool.Validate(); err != nil {
		return err
	}
	if t.Handler == nil {
		return fmt.Errorf("%w: %q has no handler", ErrInvalidTool, t.Name)
	}
	if len(t.InputSchema) > 0 {
		var schema struct {
			Required []string `json:"required"`
		}
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
			return fmt.Errorf("%w: %q inputSchema: \"required\" must be an array of property names: %v", ErrInvalidTool, t.Name, err)
		}
		t.required = schema.Required
	}
	return nil
}

// agentEncodeToolList returns the tools/list result for tools, in order.
// Tools are fixed once Run starts, so this is computed once.
func agentEncodeToolList(tools []Tool) (json.RawMessage, error) {
	list := struct {
		Tools []mcp.Tool `json:"tools"`
	}{Tools: make([]mcp.Tool, 0, len(tools))}
	for i := range tools {
		list.Tools = append(list.Tools, tools[i].Tool)
	}
	b, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("encode tools/list: %w", err)
	}
	return b, nil
}
