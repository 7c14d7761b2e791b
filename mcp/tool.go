package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrInvalidTool is wrapped by Tool.Validate's errors.
var ErrInvalidTool = errors.New("invalid tool")

// MaxToolName is MCP's limit on the length of a tool name.
const MaxToolName = 128

// DefaultInputSchema is the inputSchema listed for a tool that declares
// none: MCP requires one on every tool.
const DefaultInputSchema = `{"type":"object"}`

// Tool is a tool's definition as tools/list lists it.
type Tool struct {
	// Name identifies the tool in tools/call: 1 to 128 characters from
	// A-Z a-z 0-9 _ - . (MCP's rule).
	Name string
	// Title is a human-readable name; optional.
	Title string
	// Description tells a model what the tool does and when to use it.
	Description string
	// InputSchema is the JSON Schema (an object schema) of the arguments;
	// nil means DefaultInputSchema.
	InputSchema json.RawMessage
	// OutputSchema is the JSON Schema of a result's StructuredContent;
	// optional. A tool that declares one must return StructuredContent
	// that conforms to it.
	OutputSchema json.RawMessage
	// Annotations are hints about the tool's behaviour. A read-only token
	// may call only tools with ReadOnlyHint true.
	Annotations *ToolAnnotations
}

// ToolAnnotations are MCP's tool annotations: hints for the client, never
// guarantees. A nil hint is unset and means the MCP default (not
// read-only, destructive, not idempotent, open world).
type ToolAnnotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// ReadOnly reports whether t is annotated readOnlyHint: true.
func (t Tool) ReadOnly() bool {
	return t.Annotations != nil && t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint
}

// ValidName reports whether s is a tool name MCP allows.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxToolName {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// Validate checks what MCP requires of a listed tool: a valid name and
// object schemas. Its errors wrap ErrInvalidTool.
func (t *Tool) Validate() error {
	if !ValidName(t.Name) {
		return fmt.Errorf("%w: name %q: 1 to %d characters from A-Z a-z 0-9 _ - .", ErrInvalidTool, t.Name, MaxToolName)
	}
	if err := checkObjectSchema(t.InputSchema); err != nil {
		return fmt.Errorf("%w: %q inputSchema: %w", ErrInvalidTool, t.Name, err)
	}
	if err := checkObjectSchema(t.OutputSchema); err != nil {
		return fmt.Errorf("%w: %q outputSchema: %w", ErrInvalidTool, t.Name, err)
	}
	return nil
}

// checkObjectSchema accepts an absent schema or a JSON object whose
// "type", if present, is "object".
func checkObjectSchema(s json.RawMessage) error {
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

// toolWire is the wire shape of a Tool.
type toolWire struct {
	Name         string           `json:"name"`
	Title        string           `json:"title,omitempty"`
	Description  string           `json:"description,omitempty"`
	InputSchema  json.RawMessage  `json:"inputSchema"`
	OutputSchema json.RawMessage  `json:"outputSchema,omitempty"`
	Annotations  *ToolAnnotations `json:"annotations,omitempty"`
}

// MarshalJSON encodes t as tools/list lists it, inputSchema defaulted.
func (t Tool) MarshalJSON() ([]byte, error) {
	w := toolWire{Name: t.Name, Title: t.Title, Description: t.Description, Annotations: t.Annotations}
	w.InputSchema = json.RawMessage(DefaultInputSchema)
	if len(bytes.TrimSpace(t.InputSchema)) > 0 {
		w.InputSchema = t.InputSchema
	}
	if len(bytes.TrimSpace(t.OutputSchema)) > 0 {
		w.OutputSchema = t.OutputSchema
	}
	return json.Marshal(w)
}
