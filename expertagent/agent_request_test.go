package expertagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/mcp"
)

func TestCallRequestBind(t *testing.T) {
	type args struct {
		Text  string   `json:"text"`
		N     int      `json:"n"`
		Tags  []string `json:"tags"`
		Inner struct {
			On bool `json:"on"`
		} `json:"inner"`
	}
	tests := []struct {
		name    string
		raw     string
		want    args
		wantErr string // substring; errors must wrap ErrInvalidArguments
	}{
		{name: "all fields", raw: `{"text":"a","n":2,"tags":["x"],"inner":{"on":true}}`,
			want: args{Text: "a", N: 2, Tags: []string{"x"}, Inner: struct {
				On bool `json:"on"`
			}{true}}},
		{name: "absent arguments leave defaults", raw: ``, want: args{N: 7}},
		{name: "null arguments leave defaults", raw: `null`, want: args{N: 7}},
		{name: "empty object", raw: `{}`, want: args{N: 7}},
		{name: "unknown field", raw: `{"text":"a","extra":1}`, wantErr: `unknown field "extra"`},
		{name: "unknown nested field", raw: `{"inner":{"off":true}}`, wantErr: `unknown field "off"`},
		{name: "wrong type", raw: `{"n":"two"}`, wantErr: `field "n": want integer, got string`},
		{name: "wrong nested type", raw: `{"inner":{"on":1}}`, wantErr: `field "inner.on": want boolean, got number`},
		{name: "not an object", raw: `[1]`, wantErr: `arguments must be a JSON object, got array`},
		{name: "broken JSON", raw: `{"text":`, wantErr: `invalid arguments`},
		{name: "trailing data", raw: `{"text":"a"} {"text":"b"}`, wantErr: `trailing data`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &expertagent.CallRequest{Name: "t", Arguments: json.RawMessage(tc.raw)}
			got := args{N: 7}
			err := req.Bind(&got)
			if tc.wantErr != "" {
				if !errors.Is(err, expertagent.ErrInvalidArguments) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Bind = %v, want ErrInvalidArguments containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Bind: %v", err)
			}
			if g, w := mustJSON(t, got), mustJSON(t, tc.want); g != w {
				t.Errorf("bound %s, want %s", g, w)
			}
		})
	}
}

// Bind names a property as the arguments (and the schema) spell it, not
// as the Go field that took it: encoding/json matches keys to untagged
// fields without regard to case, and reports the field.
func TestCallRequestBindNamesKeys(t *testing.T) {
	type Base struct{ Zone string }
	type untagged struct {
		Base  // embedded: its fields are at the top level
		Count int
		Items []struct{ Size int }
		Inner struct{ OnOff bool }
	}
	tests := []struct{ name, raw, want string }{
		{"top level", `{"count":"x"}`, `field "count": want integer, got string`},
		{"as the caller spelt it", `{"COUNT":"x"}`, `field "COUNT": want integer, got string`},
		{"nested", `{"inner":{"onoff":"yes"}}`, `field "inner.onoff": want boolean, got string`},
		{"in an array", `{"items":[{"size":1},{"size":"big"}]}`, `field "items.size": want integer, got string`},
		{"embedded struct", `{"zone":5}`, `field "zone": want string, got number`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var v untagged
			err := (&expertagent.CallRequest{Arguments: json.RawMessage(tc.raw)}).Bind(&v)
			if !errors.Is(err, expertagent.ErrInvalidArguments) || !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("Bind = %v, want ErrInvalidArguments ending %q", err, tc.want)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestContentJSON(t *testing.T) {
	tests := []struct {
		name string
		c    mcp.Content
		want string
	}{
		{"text", mcp.TextContent("hi"), `{"type":"text","text":"hi"}`},
		{"empty text keeps its member", mcp.TextContent(""), `{"type":"text","text":""}`},
		{"image", mcp.ImageContent([]byte{0x89, 'P', 'N', 'G'}, "image/png"), `{"type":"image","data":"iVBORw==","mimeType":"image/png"}`},
		{"audio", mcp.Content{Type: mcp.ContentAudio, Data: "AAAA", MimeType: "audio/wav"}, `{"type":"audio","data":"AAAA","mimeType":"audio/wav"}`},
		{"resource link", mcp.Content{Type: mcp.ContentResourceLink, URI: "file:///r.txt", Name: "r.txt", MimeType: "text/plain"},
			`{"type":"resource_link","mimeType":"text/plain","uri":"file:///r.txt","name":"r.txt"}`},
		{"embedded resource", mcp.Content{Type: mcp.ContentResource, Resource: &mcp.ResourceContents{URI: "mem://x", MimeType: "text/plain", Text: "body"}},
			`{"type":"resource","resource":{"uri":"mem://x","mimeType":"text/plain","text":"body"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustJSON(t, tc.c); got != tc.want {
				t.Errorf("json = %s, want %s", got, tc.want)
			}
			var back mcp.Content
			if err := json.Unmarshal([]byte(tc.want), &back); err != nil || mustJSON(t, back) != tc.want {
				t.Errorf("round trip = %s (%v), want %s", mustJSON(t, back), err, tc.want)
			}
		})
	}
}

func TestResultHelpers(t *testing.T) {
	if r := mcp.TextResult("ok"); r.IsError || len(r.Content) != 1 || r.Content[0].Text != "ok" {
		t.Errorf("Text = %+v", r)
	}
	if r := mcp.ErrorResult("no %s", "luck"); !r.IsError || len(r.Content) != 1 || r.Content[0].Text != "no luck" {
		t.Errorf("Errorf = %+v", r)
	}
}

// A request built by hand (in a tool's unit test) has no connection:
// Progress and Log do nothing, so handlers can be tested without a broker.
func TestRequestWithoutAgent(t *testing.T) {
	req := &expertagent.CallRequest{MethodRequest: expertagent.MethodRequest{ProgressToken: json.RawMessage(`"p"`)}}
	ctx := context.Background()
	if err := req.Progress(ctx, 1, 2, "half"); err != nil {
		t.Errorf("Progress = %v", err)
	}
	if err := req.Log(ctx, "info", "x"); err != nil {
		t.Errorf("Log = %v", err)
	}
	if err := req.Log(ctx, "verbose", "x"); !errors.Is(err, expertagent.ErrInvalidLogLevel) {
		t.Errorf("Log(verbose) = %v, want ErrInvalidLogLevel", err)
	}
}
