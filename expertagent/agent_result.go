package expertagent

import (
	"encoding/json"

	"github.com/toolbus/toolbus/mcp"
)

// encodeResult returns res as a tools/call result. When Content is empty
// and StructuredContent is set, the Agent adds one text content holding
// StructuredContent as JSON, as MCP advises for clients that only read
// content.
func encodeResult(res *mcp.CallToolResult) (json.RawMessage, error) {
	if len(res.Content) == 0 && res.StructuredContent != nil {
		sc, err := mcp.StructuredJSON(res.StructuredContent)
		if err != nil {
			return nil, err
		}
		r := *res
		r.Content = []mcp.Content{mcp.TextContent(string(sc))}
		r.StructuredContent = json.RawMessage(sc)
		res = &r
	}
	return res.AppendJSON(nil)
}
