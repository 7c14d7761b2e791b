package mcp_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/mcp"
)

func TestValidName(t *testing.T) {
	for s, want := range map[string]bool{
		"echo": true, "platform_whoami": true, "a.b-c_d": true, strings.Repeat("a", 128): true,
		"": false, strings.Repeat("a", 129): false, "a/b": false, "+": false, "#": false, "$SYS": false,
		"..": true, "é": false, "a b": false, "a\x00": false,
	} {
		if got := mcp.ValidName(s); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestToolValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		tool mcp.Tool
		ok   bool
	}{
		{"plain", mcp.Tool{Name: "echo"}, true},
		{"object schemas", mcp.Tool{Name: "x", InputSchema: json.RawMessage(` {"type":"object"}`), OutputSchema: json.RawMessage(`{}`)}, true},
		{"bad name", mcp.Tool{Name: "a b"}, false},
		{"input not an object", mcp.Tool{Name: "x", InputSchema: json.RawMessage(`[]`)}, false},
		{"input of another type", mcp.Tool{Name: "x", InputSchema: json.RawMessage(`{"type":"string"}`)}, false},
		{"output invalid", mcp.Tool{Name: "x", OutputSchema: json.RawMessage(`{`)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.tool.Validate()
			if (err == nil) != tc.ok || err != nil && !errors.Is(err, mcp.ErrInvalidTool) {
				t.Errorf("Validate() = %v, want ok %v (wrapping ErrInvalidTool)", err, tc.ok)
			}
		})
	}
}

func TestToolJSON(t *testing.T) {
	ro := true
	for _, tc := range []struct {
		name string
		tool mcp.Tool
		want string
	}{
		{"defaults", mcp.Tool{Name: "echo"}, `{"name":"echo","inputSchema":{"type":"object"}}`},
		{"all", mcp.Tool{Name: "x", Title: "X", Description: "d", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`),
			OutputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: &ro}},
			`{"name":"x","title":"X","description":"d","inputSchema":{"type":"object","properties":{}},"outputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.tool)
			if err != nil || string(got) != tc.want {
				t.Errorf("json.Marshal = %s, %v; want %s", got, err, tc.want)
			}
			if tc.tool.ReadOnly() != (tc.tool.Annotations != nil) {
				t.Errorf("ReadOnly() = %v", tc.tool.ReadOnly())
			}
		})
	}
}
