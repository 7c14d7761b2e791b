package platformtools

import (
	"context"
	"fmt"

	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/store"
)

// Tool is one platform tool: its MCP definition (listed as it is), the
// scope it needs and the Go code that runs it.
type Tool struct {
	// Tool is the definition. Name must be unique in a Registry.
	// InputSchema is a JSON Schema (draft 2020-12 unless it says otherwise)
	// whose references ($ref) may point only inside the schema itself:
	// nothing is loaded from files or the network.
	mcp.Tool
	// Scope is an extra scope a token needs to see and call the tool, beside
	// tools:list / tools:call; "" means none. It must match
	// ^[a-z][a-z0-9_.:-]{0,63}$ (acl's rule for tool scopes).
	Scope   string
	Handler Handler
}

// Handler runs a tool. ctx ends when the caller goes away or the call's
// deadline passes. A returned error becomes an isError result carrying
// err.Error(), so it should say what happened and what to do.
type Handler func(ctx context.Context, call *Call) (*mcp.CallToolResult, error)

// Visible reports whether tok may see t in tools/list: it needs tools:list,
// and t.Scope when the tool has one.
func Visible(tok store.Token, t Tool) bool {
	return tok.HasScope(store.ScopeToolsList) && (t.Scope == "" || tok.HasScope(t.Scope))
}

// Authorize reports whether tok may call t in context c. A tool whose own
// scope the token lacks is hidden from it, so calling it gives
// ErrUnknownTool, as for a tool that does not exist. Otherwise the token
// needs tools:call (tools:list is not needed to call a tool whose name the
// caller knows), a read-only token may call only tools annotated
// readOnlyHint: true, and an entity-narrowed token only reaches its
// entities. Refusals wrap ErrForbidden.
func Authorize(tok store.Token, t Tool, c store.Entity) error {
	if t.Scope != "" && !tok.HasScope(t.Scope) {
		return fmt.Errorf("%w: %q", ErrUnknownTool, t.Name)
	}
	if !tok.HasScope(store.ScopeToolsCall) {
		return fmt.Errorf("%w: token lacks scope %s", ErrForbidden, store.ScopeToolsCall)
	}
	if tok.ReadOnly && !t.ReadOnly() {
		return fmt.Errorf("%w: a read-only token may call only tools annotated readOnlyHint, and %q is not", ErrForbidden, t.Name)
	}
	if !tok.AllowsEntity(c) {
		return fmt.Errorf("%w: token is not valid for entity %s/%s", ErrForbidden, c.Type, c.ID)
	}
	return nil
}
