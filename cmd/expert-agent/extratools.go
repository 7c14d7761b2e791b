package main

import (
	"context"
	"fmt"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/mcp"
)

// maxExtraTools bounds --extra-tools: the names have four digits, and the
// agent answers tools/list in one message, which must stay far below the
// broker's packet limit.
const maxExtraTools = 9999

// extraToolSchema is the small input schema every extra tool shares.
var extraToolSchema = []byte(`{"type":"object","properties":{"text":{"type":"string","description":"Ignored."}},"additionalProperties":false}`)

// extraTools returns n trivial tools, tool_0001 ... tool_<n>, each of which
// answers its own name: a tool list of a realistic size for benchmarks of
// tools/list, without touching the real tools.
func extraTools(n int) []expertagent.Tool {
	out := make([]expertagent.Tool, 0, n)
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("tool_%04d", i)
		out = append(out, expertagent.Tool{
			Tool: mcp.Tool{
				Name:        name,
				Description: fmt.Sprintf("Extra tool %d of %d, served for benchmarks; answers its own name.", i, n),
				InputSchema: extraToolSchema,
				Annotations: readOnlyAnnotations(name),
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				return mcp.TextResult(name), nil
			},
		})
	}
	return out
}
