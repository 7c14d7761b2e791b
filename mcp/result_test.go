package mcp_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/mcp"
)

func TestResultJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		res     *mcp.CallToolResult
		want    string
		wantErr string
	}{
		{"text", mcp.TextResult("hi"), `{"content":[{"type":"text","text":"hi"}]}`, ""},
		{"empty text keeps text", mcp.TextResult(""), `{"content":[{"type":"text","text":""}]}`, ""},
		{"no content is an empty array", &mcp.CallToolResult{}, `{"content":[]}`, ""},
		{"error", mcp.ErrorResult("bad %s", "thing"), `{"content":[{"type":"text","text":"bad thing"}],"isError":true}`, ""},
		{"json object", mcp.JSONResult(struct {
			A int    `json:"a"`
			B string `json:"b"`
		}{1, "<x>"}), `{"content":[{"type":"text","text":"{\"a\":1,\"b\":\"\\u003cx\\u003e\"}"}],"structuredContent":{"a":1,"b":"\u003cx\u003e"}}`, ""},
		{"json raw is compacted", mcp.JSONResult(json.RawMessage("{ \"a\" : [1, 2] }\n")),
			`{"content":[{"type":"text","text":"{\"a\":[1,2]}"}],"structuredContent":{"a":[1,2]}}`, ""},
		{"json array has no structuredContent", mcp.JSONResult([]int{1, 2}), `{"content":[{"type":"text","text":"[1,2]"}]}`, ""},
		{"json invalid raw", mcp.JSONResult(json.RawMessage(`{"a":`)), "", ""},
		{"json unencodable", mcp.JSONResult(func() {}), "", ""},
		{"escapes", mcp.TextResult("a\"b\\c\nd\te\x01f\u2028g<h>&\xff"),
			`{"content":[{"type":"text","text":"a\"b\\c\nd\te\u0001f\u2028g<h>&\ufffd"}]}`, ""},
		{"image and resource", &mcp.CallToolResult{Content: []mcp.Content{
			{Type: mcp.ContentImage, Data: "aGk=", MimeType: "image/png"},
			{Type: mcp.ContentResourceLink, URI: "file:///a", Name: "a", Description: "the a"},
			{Type: mcp.ContentResource, Resource: &mcp.ResourceContents{URI: "file:///b", Text: "b"}},
		}}, `{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"},` +
			`{"type":"resource_link","uri":"file:///a","name":"a","description":"the a"},` +
			`{"type":"resource","resource":{"uri":"file:///b","text":"b"}}]}`, ""},
		{"structured raw", &mcp.CallToolResult{StructuredContent: json.RawMessage(` {"x":true} `)}, `{"content":[],"structuredContent":{"x":true}}`, ""},
		{"structured map", &mcp.CallToolResult{StructuredContent: map[string]int{"x": 1}, IsError: true}, `{"content":[],"structuredContent":{"x":1},"isError":true}`, ""},
		{"structured array refused", &mcp.CallToolResult{StructuredContent: []int{1}}, "", "must be a JSON object"},
		{"structured invalid raw refused", &mcp.CallToolResult{StructuredContent: json.RawMessage(`{`)}, "", "not valid JSON"},
		{"content without type refused", &mcp.CallToolResult{Content: []mcp.Content{{Text: "x"}}}, "", "without a type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.res.AppendJSON([]byte("prefix"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("AppendJSON err = %v, want %q", err, tc.wantErr)
				}
				if string(got) != "prefix" {
					t.Errorf("AppendJSON on error left %q, want the prefix only", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("AppendJSON: %v", err)
			}
			body, ok := strings.CutPrefix(string(got), "prefix")
			if !ok {
				t.Fatalf("AppendJSON dropped the prefix: %q", got)
			}
			if !json.Valid([]byte(body)) {
				t.Fatalf("AppendJSON produced invalid JSON: %s", body)
			}
			if tc.want == "" { // an ErrorResult made by JSONResult
				if !strings.Contains(body, `"isError":true`) {
					t.Errorf("got %s, want an isError result", body)
				}
				return
			}
			if body != tc.want {
				t.Errorf("AppendJSON =\n%s\nwant\n%s", body, tc.want)
			}
			// encoding/json re-escapes a Marshaler's output (<, >, &), so
			// compare values.
			viaMarshal, err := json.Marshal(tc.res)
			if err != nil || !jsonEqual(t, viaMarshal, []byte(body)) {
				t.Errorf("json.Marshal = %s, %v; want the same as AppendJSON", viaMarshal, err)
			}
		})
	}
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("jsonEqual: %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("jsonEqual: %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}
