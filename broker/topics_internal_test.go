package broker

import "testing"

// TestIsDirectFilter: only one exact request or response topic is kept off
// mochi's tree; a filter with a wildcard, or any other topic, goes there.
func TestIsDirectFilter(t *testing.T) {
	for filter, want := range map[string]bool{
		"ff/v1/mcp/p/u/s/t/e/res":   true,
		"ff/v1/mcp/p/u/s/t/e/req":   true,
		"ff/v1/mcp/p/+/s/t/e/res":   false,
		"ff/v1/mcp/+/+/+/+/+/req":   false,
		"ff/v1/mcp/p/u/s/t/e/#":     false,
		"ff/v1/mcp/p/u/s/t/res":     false,
		"ff/v1/mcp/p/u/s/t/e/x":     false,
		"ff/v1/mcp/agents/a/status": false,
		"x/ff/v1/mcp/p/u/s/t/e/res": false,
		"sensors/a":                 false,
	} {
		if got := isDirectFilter(filter); got != want {
			t.Errorf("isDirectFilter(%q) = %v, want %v", filter, got, want)
		}
	}
}
