package expertagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrInvalidTool is returned by AddTool for a tool that cannot be listed:
// no name, a name MCP does not allow, no handler, or a schema that is not a
// JSON object schema.
var ErrInvalidTool = errors.New("invalid tool")

// ErrDuplicateTool is returned by AddTool for a second tool with the same name.
var ErrDuplicateTool = errors.New("duplicate tool name")

// agentMaxToolName is MCP's limit on a tool name (2025-11-25: 1 to 128 characters).
const agentMaxToolName = 128

// agentDefaultInputSchema is the schema of a tool that takes no declared
// arguments; MCP requires inputSchema on every tool.
var agentDefaultInputSchema = json.RawMessage(`{"type":"object"}`)

// Tool is one tool an Agent serves. Name, InputSchema, OutputSchema and
// Annotations are listed to callers exactly as MCP's tools/list defines them.
type Tool struct {
	// Name identifies the tool in tools/call: 1 to 128 characters from
	// A-Z a-z 0-9 _ - . (MCP's rule).
	Name string
	// Title is a human-readable name; optional.
	Title string
	// Description tells a model what the tool does and when to use it.
	Description string
	// InputSchema is the JSON Schema (an object schema) of the arguments;
	// nil means {"type":"object"}.
	InputSchema json.RawMessage
	// OutputSchema is the JSON Schema of StructuredContent; optional. A tool
	// that declares one must return StructuredContent that conforms to it.
	OutputSchema json.RawMessage
	// Annotations are hints about the tool's behaviour. The gateway lets a
	// read-only token call only tools with ReadOnlyHint true, and the Agent
	// checks the same again.
	Annotations *ToolAnnotations
	// Handler runs a call. Required.
	Handler ToolHandler
}

// ToolAnnotations are MCP's tool annotations. A nil hint is unset and means
// the MCP default (not read-only, destructive, not idempotent, open world).
type ToolAnnotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// ToolHandler runs one tools/call. ctx ends at the deadline the gateway set
// for the call, when the caller cancels it (notifications/cancelled), or when
// the Agent stops. An error becomes a result with isError true and the
// error's text, so the model can read what went wrong; return a
// *jsonrpc.Error instead to answer with a JSON-RPC error.
type ToolHandler func(ctx context.Context, req *CallRequest) (*CallResult, error)

// readOnly reports whether the tool is annotated read-only.
func (t *Tool) readOnly() bool {
	return t.Annotations != nil && t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint
}

// validate checks what MCP requires of a listed tool.
func (t *Tool) validate() error {
	if t.Name == "" || len(t.Name) > agentMaxToolName {
		return fmt.Errorf("%w: name must be 1 to %d characters, got %d", ErrInvalidTool, agentMaxToolName, len(t.Name))
	}
	for i := 0; i < len(t.Name); i++ {
		c := t.Name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%w: name %q: byte %q at offset %d (allowed: A-Z a-z 0-9 _ - .)", ErrInvalidTool, t.Name, c, i)
		}
	}
	if t.Handler == nil {
		return fmt.Errorf("%w: %q has no handler", ErrInvalidTool, t.Name)
	}
	if err := agentCheckObjectSchema(t.InputSchema); err != nil {
		return fmt.Errorf("%w: %q inputSchema: %v", ErrInvalidTool, t.Name, err)
	}
	if err := agentCheckObjectSchema(t.OutputSchema); err != nil {
		return fmt.Errorf("%w: %q outputSchema: %v", ErrInvalidTool, t.Name, err)
	}
	return nil
}

// agentCheckObjectSchema accepts an absent schema or a JSON object whose
// "type", if present, is "object": MCP requires object schemas for both
// inputSchema and outputSchema (an absent inputSchema gets a default).
func agentCheckObjectSchema(s json.RawMessage) error {
	s = bytes.TrimSpace(s)
	if len(s) == 0 {
		return nil
	}
	if s[0] != '{' {
		return errors.New("not a JSON object")
	}
	var head struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(s, &head); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	if head.Type != nil && head.Type != "object" {
		return fmt.Errorf(`"type" must be "object", got %v`, head.Type)
	}
	return nil
}

// agentToolWire is a tool as tools/list lists it.
type agentToolWire struct {
	Name         string           `json:"name"`
	Title        string           `json:"title,omitempty"`
	Description  string           `json:"description,omitempty"`
	InputSchema  json.RawMessage  `json:"inputSchema"`
	OutputSchema json.RawMessage  `json:"outputSchema,omitempty"`
	Annotations  *ToolAnnotations `json:"annotations,omitempty"`
}

// agentEncodeToolList returns the tools/list result for tools, in order.
// Tools are fixed once Run starts, so this is computed once.
func agentEncodeToolList(tools []Tool) (json.RawMessage, error) {
	list := struct {
		Tools []agentToolWire `json:"tools"`
	}{Tools: make([]agentToolWire, 0, len(tools))}
	for i := range tools {
		t := &tools[i]
		in := t.InputSchema
		if len(bytes.TrimSpace(in)) == 0 {
			in = agentDefaultInputSchema
		}
		var out json.RawMessage
		if len(bytes.TrimSpace(t.OutputSchema)) > 0 {
			out = t.OutputSchema
		}
		list.Tools = append(list.Tools, agentToolWire{
			Name: t.Name, Title: t.Title, Description: t.Description,
			InputSchema: in, OutputSchema: out, Annotations: t.Annotations,
		})
	}
	b, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("encode tools/list: %w", err)
	}
	return b, nil
}
