package mcp

// Bool returns a pointer to b, for the hints of ToolAnnotations, where nil
// means "unset" (the MCP default) and differs from false:
//
//	Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)}
//
// A read-only token calls only tools annotated ReadOnlyHint true.
func Bool(b bool) *bool { return &b }
