package expertagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/mcp"
)

// Bind speaks the schema's language over a real call: a property is named
// by its key ("x", not the Go field X), a type as JSON Schema names it,
// and a property the inputSchema requires that is absent is an isError
// result, never a zero value passed to the handler.
func TestAgentBindFollowsSchema(t *testing.T) {
	e := agStartBroker(t)
	point := expertagent.Tool{
		Tool: mcp.Tool{
			Name: "point",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"},"label":{"type":"string"},` +
				`"inner":{"type":"object","properties":{"on":{"type":"boolean"}}}},"required":["x","label"]}`),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true)},
		},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			var a struct { // untagged, as authors write them: encoding/json matches keys without regard to case
				X     int
				Label string
				Inner struct{ On bool }
			}
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			return mcp.TextResult(fmt.Sprintf("%d %s %t", a.X, a.Label, a.Inner.On)), nil
		},
	}
	e.startAgent(t, expertagent.AgentOptions{}, point, agEchoTool())
	c := e.newCaller(t)

	tests := []struct {
		name, tool string
		args       any
		wantError  bool
		wantText   string
	}{
		{name: "all there", tool: "point", args: map[string]any{"x": 1, "label": "a", "inner": map[string]any{"on": true}}, wantText: "1 a true"},
		{name: "one required missing", tool: "point", args: map[string]any{"label": "a"}, wantError: true,
			wantText: `invalid arguments: field "x" is required`},
		{name: "all required missing", tool: "point", args: map[string]any{}, wantError: true,
			wantText: `invalid arguments: fields "x", "label" are required`},
		{name: "no arguments at all", tool: "point", wantError: true, wantText: `invalid arguments: fields "x", "label" are required`},
		{name: "a key of another case is not the required one", tool: "point", args: map[string]any{"X": 1, "label": "a"}, wantError: true,
			wantText: `invalid arguments: field "x" is required`},
		{name: "type error names the key", tool: "point", args: map[string]any{"x": "one", "label": "a"}, wantError: true,
			wantText: `invalid arguments: field "x": want integer, got string`},
		{name: "nested type error names the keys", tool: "point", args: map[string]any{"x": 1, "label": "a", "inner": map[string]any{"on": 1}},
			wantError: true, wantText: `invalid arguments: field "inner.on": want boolean, got number`},
		{name: "echo without its required text", tool: "echo", args: map[string]any{}, wantError: true,
			wantText: `invalid arguments: field "text" is required`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.response(t, c.send(t, "tools/call", agCallParams(tc.tool, tc.args, nil), agSendOpts{}))
			if r.msg.Error != nil {
				t.Fatalf("JSON-RPC error %v, want a result", r.msg.Error)
			}
			res := agDecodeResult(t, r.msg.Result)
			if res.IsError != tc.wantError || len(res.Content) != 1 || res.Content[0]["text"] != tc.wantText {
				t.Errorf("result %s, want isError %v and text %q", r.msg.Result, tc.wantError, tc.wantText)
			}
		})
	}
}

// AddTool refuses an inputSchema whose "required" is not a list of
// property names: Bind could not check it.
func TestAgentAddToolBadRequired(t *testing.T) {
	a := expertagent.NewAgent(expertagent.AgentOptions{BrokerURL: "tcp://127.0.0.1:1", Username: "agent1"})
	ok := func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }
	for _, schema := range []string{`{"type":"object","required":"x"}`, `{"type":"object","required":[1]}`} {
		err := a.AddTool(expertagent.Tool{Tool: mcp.Tool{Name: "t", InputSchema: json.RawMessage(schema)}, Handler: ok})
		if !errors.Is(err, expertagent.ErrInvalidTool) {
			t.Errorf("AddTool(%s) = %v, want ErrInvalidTool", schema, err)
		}
	}
}
