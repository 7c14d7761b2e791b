package platformtools

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/acl"
)

// Annotations are MCP's tool annotations: hints for the client, never
// guarantees. ReadOnlyHint matters here too: a read-only token may call only
// tools that set it to true.
type Annotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// Tool is one platform tool.
type Tool struct {
	// Name must match ^[A-Za-z0-9_.-]{1,128}$ and be unique in a Registry.
	Name        string
	Title       string
	Description string
	// InputSchema is a JSON Schema (draft 2020-12 unless it says otherwise)
	// whose top level has "type": "object", as MCP requires. nil means
	// {"type":"object"} (any arguments). References ($ref) may point only
	// inside the schema itself: nothing is loaded from files or the network.
	InputSchema json.RawMessage
	// OutputSchema, if set, describes StructuredContent; same rules.
	OutputSchema json.RawMessage
	Annotations  *Annotations
	// Scope is an extra scope a token needs to see and call the tool, beside
	// tools:list / tools:call; "" means none. It must match
	// ^[a-z][a-z0-9_.:-]{0,63}$ (acl's rule for tool scopes).
	Scope   string
	Handler Handler
}

// Handler runs a tool. ctx ends when the caller goes away or the call's
// deadline passes. A returned error becomes an isError result carrying
// err.Error(), so it should say what happened and what to do.
type Handler func(ctx context.Context, call *Call) (*Result, error)

// ReadOnly reports whether t is annotated readOnlyHint: true.
func (t Tool) ReadOnly() bool {
	return t.Annotations != nil && t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint
}

// MarshalJSON encodes t as an MCP Tool object (name, title, description,
// inputSchema, outputSchema, annotations). Scope and Handler are the
// gateway's business and are not encoded.
func (t Tool) MarshalJSON() ([]byte, error) {
	in := t.InputSchema
	if len(in) == 0 {
		in = json.RawMessage(defaultInputSchema)
	}
	return json.Marshal(mcpTool{
		Name:         t.Name,
		Title:        t.Title,
		Description:  t.Description,
		InputSchema:  in,
		OutputSchema: t.OutputSchema,
		Annotations:  t.Annotations,
	})
}

// mcpTool is the wire shape of an MCP Tool.
type mcpTool struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  *Annotations    `json:"annotations,omitempty"`
}

const defaultInputSchema = `{"type":"object"}`

// Visible reports whether tok may see t in tools/list: it needs tools:list,
// and t.Scope when the tool has one.
func Visible(tok acl.Token, t Tool) bool {
	return tok.HasScope(acl.ScopeToolsList) && (t.Scope == "" || tok.HasScope(t.Scope))
}

// Authorize reports whether tok may call t in context c. A tool whose own
// scope the token lacks is hidden from it, so calling it gives
// ErrUnknownTool, as for a tool that does not exist. Otherwise the token
// needs tools:call (tools:list is not needed to call a tool whose name the
// caller knows), a read-only token may call only tools annotated
// readOnlyHint: true, and an entity-narrowed token only reaches its
// entities. Refusals wrap ErrForbidden.
func Authorize(tok acl.Token, t Tool, c acl.Entity) error {
	if t.Scope != "" && !tok.HasScope(t.Scope) {
		return fmt.Errorf("%w: %q", ErrUnknownTool, t.Name)
	}
	if !tok.HasScope(acl.ScopeToolsCall) {
		return fmt.Errorf("%w: token lacks scope %s", ErrForbidden, acl.ScopeToolsCall)
	}
	if tok.ReadOnly && !t.ReadOnly() {
		return fmt.Errorf("%w: a read-only token may call only tools annotated readOnlyHint, and %q is not", ErrForbidden, t.Name)
	}
	if !tok.AllowsEntity(c) {
		return fmt.Errorf("%w: token is not valid for entity %s/%s", ErrForbidden, c.Type, c.ID)
	}
	return nil
}

// validToolName reports whether s matches ^[A-Za-z0-9_.-]{1,128}$.
func validToolName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
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
