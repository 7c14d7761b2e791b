package conformance

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// TestFixture runs every non-MRTR feature over the real broker: one agent
// serves all the subtests.
func TestFixture(t *testing.T) {
	f := startFixture(t, Options{})

	t.Run("initialize", func(t *testing.T) {
		res := f.request(t, "u1", "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`).result(t)
		var init struct {
			Capabilities map[string]json.RawMessage `json:"capabilities"`
		}
		if err := json.Unmarshal(res, &init); err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"tools", "resources", "prompts", "completions"} {
			if init.Capabilities[c] == nil {
				t.Errorf("initialize capabilities %s: no %q", res, c)
			}
		}
	})

	t.Run("tools/list", func(t *testing.T) { testToolsList(t, f) })

	contentTests := []struct {
		name, args, want string
	}{
		{"test_simple_text", "", `{"content":[{"type":"text","text":"This is a simple text response for testing."}]}`},
		{"test_simple_text", "{}", `{"content":[{"type":"text","text":"This is a simple text response for testing."}]}`},
		{"test_image_content", "", `{"content":[{"type":"image","data":"` + PNGBase64 + `","mimeType":"image/png"}]}`},
		{"test_audio_content", "", `{"content":[{"type":"audio","data":"` + WAVBase64 + `","mimeType":"audio/wav"}]}`},
		{"test_embedded_resource", "", `{"content":[{"type":"resource","resource":{"uri":"test://embedded-resource","mimeType":"text/plain","text":"This is an embedded resource content."}}]}`},
		{"test_multiple_content_types", "", `{"content":[{"type":"text","text":"Multiple content types test:"},` +
			`{"type":"image","data":"` + PNGBase64 + `","mimeType":"image/png"},` +
			`{"type":"resource","resource":{"uri":"test://mixed-content-resource","mimeType":"application/json","text":"{\"test\":\"data\",\"value\":123}"}}]}`},
		{"test_error_handling", "", `{"content":[{"type":"text","text":"This tool intentionally returns an error for testing"}],"isError":true}`},
		{"test_streaming_elicitation", "", `{"content":[{"type":"text","text":"Stream observed: notifications and the result only, no request to the client."}]}`},
		{"test_x_mcp_header", `{"region":"eu-west","level":3}`, `{"content":[{"type":"text","text":"region=eu-west"}]}`},
		{"test_x_mcp_header", `{"nope":1}`, `{"content":[{"type":"text","text":"invalid arguments: unknown field \"nope\""}],"isError":true}`},
		{jsonSchema202012ID, `{"name":"n","email":"e"}`, `{"content":[{"type":"text","text":"JSON Schema 2020-12 tool called with: {\"name\":\"n\",\"email\":\"e\"}"}]}`},
		{"test_reconnection", "", `{"content":[{"type":"text","text":"` + reconnectionText + `"}]}`},
	}
	for _, tc := range contentTests {
		t.Run(tc.name+tc.args, func(t *testing.T) {
			r := f.tool(t, tc.name, call{Args: tc.args})
			wantJSON(t, "result", r.result(t), tc.want)
		})
	}

	t.Run("payloads decode", func(t *testing.T) {
		for _, s := range []string{PNGBase64, WAVBase64} {
			if _, err := base64.StdEncoding.DecodeString(s); err != nil {
				t.Errorf("%.20s...: %v", s, err)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		f.request(t, "u1", "tools/call", `{"name":"no_such_tool"}`).rpcErr(t, -32602)
		f.request(t, "u1", "tools/call", `{}`).rpcErr(t, -32602)
		f.request(t, "u1", "tools/call", `{"name":"test_simple_text","arguments":[1]}`).rpcErr(t, -32602)
		f.request(t, "u1", "tools/call", `[]`).rpcErr(t, -32602)
		f.request(t, "u1", "no/such/method", `{}`).rpcErr(t, -32601)
	})

	t.Run("progress", func(t *testing.T) {
		for _, token := range []string{`"progress-test-1"`, `7`} {
			r := f.tool(t, "test_tool_with_progress", call{Progress: token})
			r.wantText(t, "Reported progress 0, 50 and 100 of 100")
			got := r.notifications("notifications/progress")
			if len(got) != 3 {
				t.Fatalf("token %s: %d progress notifications, want 3", token, len(got))
			}
			for i, p := range []int{0, 50, 100} {
				wantJSON(t, "progress", got[i], fmt.Sprintf(`{"progressToken":%s,"progress":%d,"total":100,"message":"Completed step %d of 3"}`, token, p, i+1))
			}
		}
		r := f.tool(t, "test_tool_with_progress", call{})
		r.wantText(t, "no progress token")
		if n := len(r.notifications("notifications/progress")); n != 0 {
			t.Fatalf("%d progress notifications without a token", n)
		}
	})

	t.Run("logging", func(t *testing.T) {
		tests := []struct {
			tool, level string
			want        []string
		}{
			{"test_tool_with_logging", "", []string{"Tool execution started", "Tool processing data", "Tool execution completed"}},
			{"test_tool_with_logging", "info", []string{"Tool execution started", "Tool processing data", "Tool execution completed"}},
			{"test_tool_with_logging", "warning", nil},
			{"test_logging_tool", "", nil},
			{"test_logging_tool", "error", nil},
			{"test_logging_tool", "debug", []string{"test_logging_tool executed"}},
			{"test_logging_tool", "info", []string{"test_logging_tool executed"}},
			{"test_logging_tool", "loud", nil}, // not a level: as if none
		}
		for _, tc := range tests {
			t.Run(tc.tool+"/"+tc.level, func(t *testing.T) {
				r := f.tool(t, tc.tool, call{LogLevel: tc.level})
				r.text(t)
				var got []string
				for _, n := range r.notifications("notifications/message") {
					var m struct {
						Level, Logger string
						Data          string
					}
					if err := json.Unmarshal(n, &m); err != nil || m.Level != "info" {
						t.Fatalf("log %s: want level info (%v)", n, err)
					}
					got = append(got, m.Data)
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("logs %q, want %q", got, tc.want)
				}
			})
		}
	})

	t.Run("test_missing_capability", func(t *testing.T) {
		for _, caps := range []string{`{}`, "none", `{"elicitation":{},"roots":{}}`, `{"sampling":null}`} {
			e := f.tool(t, "test_missing_capability", call{Caps: caps}).rpcErr(t, CodeMissingClientCapability)
			wantJSON(t, "error data", e.Data, `{"requiredCapabilities":{"sampling":{}}}`)
		}
		f.tool(t, "test_missing_capability", call{Caps: `{"sampling":{}}`}).wantText(t, "declared the sampling capability")
	})

	t.Run("resources", func(t *testing.T) { testResources(t, f) })
	t.Run("prompts", func(t *testing.T) { testPrompts(t, f) })
	t.Run("completion", func(t *testing.T) { testCompletion(t, f) })
}

func testToolsList(t *testing.T, f *fx) {
	res := f.request(t, "u1", "tools/list", `{}`).result(t)
	var list struct {
		Tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"inputSchema"`
			Annotations struct {
				ReadOnlyHint bool `json:"readOnlyHint"`
			} `json:"annotations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(res, &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		var schema struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(tool.InputSchema, &schema); err != nil || schema.Type != "object" {
			t.Errorf("tool %s: inputSchema %s is not an object schema", tool.Name, tool.InputSchema)
		}
		if !tool.Annotations.ReadOnlyHint {
			t.Errorf("tool %s is not annotated read-only", tool.Name)
		}
		if tool.Name == jsonSchema202012ID && string(tool.InputSchema) != jsonSchema202012 {
			t.Errorf("json_schema_2020_12_tool inputSchema changed:\n%s\nwant\n%s", tool.InputSchema, jsonSchema202012)
		}
	}
	want := []string{
		"test_simple_text", "test_image_content", "test_audio_content", "test_embedded_resource",
		"test_multiple_content_types", "test_trigger_tool_change", "test_error_handling", "test_tool_with_progress", "test_tool_with_logging",
		"test_logging_tool", "test_missing_capability", "test_streaming_elicitation", "json_schema_2020_12_tool",
		"test_x_mcp_header", "test_reconnection",
		"test_sampling", "test_elicitation", "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums",
		"test_input_required_result_elicitation", "test_input_required_result_sampling", "test_input_required_result_list_roots",
		"test_input_required_result_request_state", "test_input_required_result_multiple_inputs",
		"test_input_required_result_multi_round", "test_input_required_result_tampered_state",
		"test_input_required_result_capabilities",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %q\nwant %q", names, want)
	}
}

func testResources(t *testing.T, f *fx) {
	wantJSON(t, "resources/list", f.request(t, "u1", "resources/list", `{}`).result(t), `{"resources":[`+
		`{"uri":"test://static-text","name":"static-text","title":"Static Text","description":"A static text resource.","mimeType":"text/plain"},`+
		`{"uri":"test://static-binary","name":"static-binary","title":"Static Binary","description":"A static binary resource: a 1x1 PNG image.","mimeType":"image/png"},`+
		`{"uri":"test://watched-resource","name":"watched-resource","title":"Watched Resource","description":"A resource clients may subscribe to.","mimeType":"text/plain"}]}`)
	wantJSON(t, "resources/templates/list", f.request(t, "u1", "resources/templates/list", "").result(t), `{"resourceTemplates":[`+
		`{"uriTemplate":"test://template/{id}/data","name":"template","title":"Template Data","description":"JSON data for any id: the id is substituted into the content.","mimeType":"application/json"}]}`)

	reads := []struct{ uri, want string }{
		{StaticTextURI, `{"contents":[{"uri":"test://static-text","mimeType":"text/plain","text":"This is the content of the static text resource."}]}`},
		{StaticBinaryURI, `{"contents":[{"uri":"test://static-binary","mimeType":"image/png","blob":"` + PNGBase64 + `"}]}`},
		{WatchedURI, `{"contents":[{"uri":"test://watched-resource","mimeType":"text/plain","text":"Watched resource content"}]}`},
		{"test://template/123/data", `{"contents":[{"uri":"test://template/123/data","mimeType":"application/json","text":"{\"id\":\"123\",\"templateTest\":true,\"data\":\"Data for ID: 123\"}"}]}`},
		{`test://template/a"b/data`, `{"contents":[{"uri":"test://template/a\"b/data","mimeType":"application/json","text":"{\"id\":\"a\\\"b\",\"templateTest\":true,\"data\":\"Data for ID: a\\\"b\"}"}]}`},
	}
	for _, tc := range reads {
		t.Run("read "+tc.uri, func(t *testing.T) {
			p, _ := json.Marshal(map[string]string{"uri": tc.uri})
			wantJSON(t, "resources/read", f.request(t, "u1", "resources/read", string(p)).result(t), tc.want)
		})
	}

	for _, uri := range []string{"test://nonexistent-resource-for-conformance-testing", "test://template//data", "test://template/1/2/data"} {
		p, _ := json.Marshal(map[string]string{"uri": uri})
		for _, method := range []string{"resources/read", "resources/subscribe"} {
			e := f.request(t, "u1", method, string(p)).rpcErr(t, -32602)
			wantJSON(t, method+" error data", e.Data, `{"uri":`+string(mustJSON(uri))+`}`)
		}
	}
	f.request(t, "u1", "resources/read", `{}`).rpcErr(t, -32602)
	f.request(t, "u1", "resources/read", `{"uri":7}`).rpcErr(t, -32602)

	for _, method := range []string{"resources/subscribe", "resources/unsubscribe"} {
		if got := string(f.request(t, "u1", method, `{"uri":"test://watched-resource"}`).result(t)); got != `{}` {
			t.Errorf("%s = %s, want {}", method, got)
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func testPrompts(t *testing.T, f *fx) {
	res := f.request(t, "u1", "prompts/list", `{}`).result(t)
	var list struct {
		Prompts []struct {
			Name, Description string
			Arguments         []struct {
				Name     string
				Required bool
			}
		}
	}
	if err := json.Unmarshal(res, &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Prompts {
		names = append(names, p.Name)
		if p.Description == "" {
			t.Errorf("prompt %s has no description", p.Name)
		}
	}
	want := []string{"test_simple_prompt", "test_prompt_with_arguments", "test_prompt_with_embedded_resource", "test_prompt_with_image", "test_input_required_result_prompt"}
	if !slices.Equal(names, want) {
		t.Fatalf("prompts %q, want %q", names, want)
	}
	if a := list.Prompts[1].Arguments; len(a) != 2 || a[0].Name != "arg1" || !a[0].Required || a[1].Name != "arg2" || !a[1].Required {
		t.Errorf("test_prompt_with_arguments arguments %+v", a)
	}

	gets := []struct{ name, args, want string }{
		{"test_simple_prompt", "", `{"description":"A simple test prompt","messages":[{"role":"user","content":{"type":"text","text":"This is a simple prompt for testing."}}]}`},
		{"test_prompt_with_arguments", `{"arg1":"hello","arg2":"world"}`,
			`{"description":"A prompt with arguments","messages":[{"role":"user","content":{"type":"text","text":"Prompt with arguments: arg1='hello', arg2='world'"}}]}`},
		{"test_prompt_with_embedded_resource", `{"resourceUri":"test://example-resource"}`,
			`{"description":"A prompt with an embedded resource","messages":[` +
				`{"role":"user","content":{"type":"resource","resource":{"uri":"test://example-resource","mimeType":"text/plain","text":"Embedded resource content for testing."}}},` +
				`{"role":"user","content":{"type":"text","text":"Please process the embedded resource above."}}]}`},
		{"test_prompt_with_image", "", `{"description":"A prompt with an image","messages":[` +
			`{"role":"user","content":{"type":"image","data":"` + PNGBase64 + `","mimeType":"image/png"}},` +
			`{"role":"user","content":{"type":"text","text":"Please analyze the image above."}}]}`},
	}
	for _, tc := range gets {
		t.Run("get "+tc.name, func(t *testing.T) {
			wantJSON(t, "prompts/get", f.prompt(t, tc.name, call{Args: tc.args}).result(t), tc.want)
		})
	}
	f.prompt(t, "no_such_prompt", call{}).rpcErr(t, -32602)
	f.prompt(t, "test_prompt_with_arguments", call{Args: `{"arg1":"only"}`}).rpcErr(t, -32602)
	f.prompt(t, "test_prompt_with_arguments", call{Args: `{"arg1":1,"arg2":"x"}`}).rpcErr(t, -32602)
}

func testCompletion(t *testing.T, f *fx) {
	tests := []struct {
		name, params, want string
		code               int
	}{
		{"prompt argument", `{"ref":{"type":"ref/prompt","name":"test_prompt_with_arguments"},"argument":{"name":"arg1","value":"test"}}`,
			`{"completion":{"values":["test","test-value-1","test-value-2"],"total":3,"hasMore":false}}`, 0},
		{"case-insensitive prefix", `{"ref":{"type":"ref/prompt","name":"test_prompt_with_arguments"},"argument":{"name":"arg2","value":"SAM"}}`,
			`{"completion":{"values":["sample","sample-value"],"total":2,"hasMore":false}}`, 0},
		{"argument without candidates", `{"ref":{"type":"ref/prompt","name":"test_simple_prompt"},"argument":{"name":"x","value":""}}`,
			`{"completion":{"values":[],"total":0,"hasMore":false}}`, 0},
		{"template variable", `{"ref":{"type":"ref/resource","uri":"test://template/{id}/data"},"argument":{"name":"id","value":"1"}}`,
			`{"completion":{"values":["1","123"],"total":2,"hasMore":false}}`, 0},
		{"unknown prompt", `{"ref":{"type":"ref/prompt","name":"nope"},"argument":{"name":"a","value":""}}`, "", -32602},
		{"unknown template", `{"ref":{"type":"ref/resource","uri":"test://nope/{x}"},"argument":{"name":"x","value":""}}`, "", -32602},
		{"bad ref type", `{"ref":{"type":"ref/tool","name":"x"},"argument":{"name":"a","value":""}}`, "", -32602},
		{"no argument", `{"ref":{"type":"ref/prompt","name":"test_simple_prompt"}}`, "", -32602},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.request(t, "u1", "completion/complete", tc.params)
			if tc.code != 0 {
				r.rpcErr(t, tc.code)
				return
			}
			wantJSON(t, "completion", r.result(t), tc.want)
		})
	}
}
