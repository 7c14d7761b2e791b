package platformtools_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/platformtools"
)

func TestResultJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		res     *platformtools.Result
		want    string
		wantErr string
	}{
		{"text", platformtools.TextResult("hi"), `{"content":[{"type":"text","text":"hi"}]}`, ""},
		{"empty text keeps text", platformtools.TextResult(""), `{"content":[{"type":"text","text":""}]}`, ""},
		{"no content is an empty array", &platformtools.Result{}, `{"content":[]}`, ""},
		{"error", platformtools.ErrorResult("bad %s", "thing"), `{"content":[{"type":"text","text":"bad thing"}],"isError":true}`, ""},
		{"json object", platformtools.JSONResult(struct {
			A int    `json:"a"`
			B string `json:"b"`
		}{1, "<x>"}), `{"content":[{"type":"text","text":"{\"a\":1,\"b\":\"\\u003cx\\u003e\"}"}],"structuredContent":{"a":1,"b":"\u003cx\u003e"}}`, ""},
		{"json raw is compacted", platformtools.JSONResult(json.RawMessage("{ \"a\" : [1, 2] }\n")),
			`{"content":[{"type":"text","text":"{\"a\":[1,2]}"}],"structuredContent":{"a":[1,2]}}`, ""},
		{"json array has no structuredContent", platformtools.JSONResult([]int{1, 2}), `{"content":[{"type":"text","text":"[1,2]"}]}`, ""},
		{"json invalid raw", platformtools.JSONResult(json.RawMessage(`{"a":`)), "", ""},
		{"json unencodable", platformtools.JSONResult(func() {}), "", ""},
		{"escapes", platformtools.TextResult("a\"b\\c\nd\te\x01f\u2028g<h>&\xff"),
			`{"content":[{"type":"text","text":"a\"b\\c\nd\te\u0001f\u2028g<h>&\ufffd"}]}`, ""},
		{"image and resource", &platformtools.Result{Content: []platformtools.Content{
			{Type: platformtools.ContentImage, Data: "aGk=", MimeType: "image/png"},
			{Type: platformtools.ContentResourceLink, URI: "file:///a", Name: "a", Description: "the a"},
			{Type: platformtools.ContentResource, Resource: json.RawMessage(`{"uri":"file:///b","text":"b"}`)},
		}}, `{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"},` +
			`{"type":"resource_link","uri":"file:///a","name":"a","description":"the a"},` +
			`{"type":"resource","resource":{"uri":"file:///b","text":"b"}}]}`, ""},
		{"structured raw", &platformtools.Result{StructuredContent: json.RawMessage(` {"x":true} `)}, `{"content":[],"structuredContent":{"x":true}}`, ""},
		{"structured map", &platformtools.Result{StructuredContent: map[string]int{"x": 1}, IsError: true}, `{"content":[],"structuredContent":{"x":1},"isError":true}`, ""},
		{"structured array refused", &platformtools.Result{StructuredContent: []int{1}}, "", "must be a JSON object"},
		{"structured invalid raw refused", &platformtools.Result{StructuredContent: json.RawMessage(`{`)}, "", "not valid JSON"},
		{"resource invalid refused", &platformtools.Result{Content: []platformtools.Content{{Type: "resource", Resource: json.RawMessage(`{`)}}}, "", "not valid JSON"},
		{"content without type refused", &platformtools.Result{Content: []platformtools.Content{{Text: "x"}}}, "", "without a type"},
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
