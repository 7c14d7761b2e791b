package mcp_test

import (
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/mcp"
)

// A tool that changes nothing, annotated so: read-only tokens may call it.
func ExampleBool() {
	t := mcp.Tool{
		Name:        "lookup",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)},
	}
	b, _ := json.Marshal(t)
	fmt.Println(string(b), t.ReadOnly())
	// Output:
	// {"name":"lookup","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true,"openWorldHint":false}} true
}
