package expertagent

import (
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/mcp"

	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/jsonrpc"
)

// The Agent's JSON (agent_json.go) must accept, fill and write exactly
// what encoding/json does. These tests compare the two on fixed
// cases and, as fuzz targets, on whatever the fuzzer finds.

var agentParamsSeeds = []string{
	`{"name":"echo","arguments":{"text":"hi"}}`,
	`{"name":"echo","arguments":null,"_meta":{"progressToken":"p-1"},"protocolVersion":"2025-11-25"}`,
	`{"NAME":"e\u0063ho","_Meta":{"ProgressToken":7},"_meta":null}`,
	`{"_meta":{"progressToken":null,"other":[1]},"extra":{"a":"b"}}`,
	`{"name":"a","name":"b","arguments":{"x":1},"arguments":[2]}`,
	`{"_meta":[]}`, `{"name":1}`, `[1]`, `null`, ` null `, `"x"`, `{"name":"a"} {}`, `{`, ``,
}

func TestAgentDecodeParamsMatchesEncodingJSON(t *testing.T) {
	for _, in := range agentParamsSeeds {
		agentCheckDecodeParams(t, []byte(in))
	}
}

func FuzzAgentDecodeParams(f *testing.F) {
	for _, in := range agentParamsSeeds {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, params []byte) { agentCheckDecodeParams(t, params) })
}

// agentCheckDecodeParams: agentDecodeParams accepts what encoding/json
// accepts, and fills the same values.
func agentCheckDecodeParams(t *testing.T, params []byte) {
	t.Helper()
	var got, want agentParams
	err := agentDecodeParams(params, &got)
	wantErr := json.Unmarshal(params, &want)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%.200q: agentDecodeParams error %v, encoding/json %v", params, err, wantErr)
	}
	if err != nil {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%.200q:\n got %+v\nwant %+v", params, got, want)
	}
}

var agentStringSeeds = []string{
	"", "hello", `quote " backslash \ slash /`, "<script>&amp;</script>", "tab\tnl\ncr\rbs\bff\f\x00\x1f\x7f",
	"caf\u00e9 \u2028 \u2029 \U0001F600", "bad \xff\xfe utf8 \xe2\x80", "\xed\xa0\x80 surrogate",
}

// TestAgentEncodeMatchesEncodingJSON checks every reply the Agent builds
// by hand against what encoding/json built before.
func TestAgentEncodeMatchesEncodingJSON(t *testing.T) {
	for _, s := range agentStringSeeds {
		agentCheckEncode(t, s, `"c-1"`)
	}
	for _, id := range []string{`1`, `-2.5e3`, `"a<b"`, `"x y"`, `[1, {"a" : "\u2028"}]`, `"caf` + "\u00e9" + `"`} {
		agentCheckEncode(t, "text", id)
	}
}

func FuzzAgentEncode(f *testing.F) {
	for _, s := range agentStringSeeds {
		f.Add(s, `"c-1"`)
	}
	f.Add("t", `[1, {"a" : "<"}]`)
	f.Fuzz(func(t *testing.T, text, id string) {
		if !json.Valid([]byte(id)) {
			return // ids come from the decoder: always valid JSON
		}
		agentCheckEncode(t, text, strings.TrimSpace(id))
	})
}

// agentCheckEncode builds replies for text (as correlation ID and as tool
// result text) and id both ways.
func agentCheckEncode(t *testing.T, text, id string) {
	t.Helper()
	for _, res := range []*mcp.CallToolResult{
		mcp.TextResult(text), {Content: []mcp.Content{mcp.TextContent(text), mcp.TextContent("2")}, IsError: true}, {}, {Content: []mcp.Content{}},
	} {
		w := struct {
			Content []mcp.Content `json:"content"`
			IsError bool          `json:"isError,omitempty"`
		}{Content: res.Content, IsError: res.IsError}
		if w.Content == nil {
			w.Content = []mcp.Content{}
		}
		want, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		// The result is the same JSON value; package mcp leaves <, > and &
		// unescaped.
		got, err := encodeResult(res)
		if err != nil || !json.Valid(got) || !agentSameJSON(got, want) {
			t.Fatalf("encodeResult %+v = %s, %v; want %s", res, got, err, want)
		}

		msg, _ := json.Marshal(&jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: json.RawMessage(id), Result: want})
		wantEnv := agentRefEnvelope(t, text, msg)
		if got := agentResponseEnvelope(text, json.RawMessage(id), want, nil); !bytes.Equal(got, wantEnv) {
			t.Fatalf("response envelope\n got %s\nwant %s", got, wantEnv)
		}
		if got := agentEnvelope(text, msg); !bytes.Equal(got, wantEnv) {
			t.Fatalf("envelope\n got %s\nwant %s", got, wantEnv)
		}
	}
	rpcErr := &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: text}
	msg, _ := json.Marshal(&jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: json.RawMessage(id), Error: rpcErr})
	wantEnv := agentRefEnvelope(t, "c", msg)
	if got := agentResponseEnvelope("c", json.RawMessage(id), nil, rpcErr); !bytes.Equal(got, wantEnv) {
		t.Fatalf("error envelope\n got %s\nwant %s", got, wantEnv)
	}
}

// agentRefEnvelope is the reply envelope as the Agent wrote it before,
// with json.Marshal (not Envelope.Encode, which may take other shortcuts).
func agentRefEnvelope(t *testing.T, corrID string, msg []byte) []byte {
	t.Helper()
	b, err := json.Marshal(&contract.Envelope{V: contract.EnvelopeVersion, CorrelationID: corrID, Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// agentSameJSON reports whether a and b are the same JSON value.
func agentSameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// agentHasKeys agrees with decoding the arguments into a map: true only
// when every required key is at the top level of an object.
func TestAgentHasKeys(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		required   []string
		want       bool
	}{
		{"all there", `{"text":"hi","n":2}`, []string{"text", "n"}, true},
		{"one missing", `{"text":"hi"}`, []string{"text", "n"}, false},
		{"only nested", `{"opts":{"text":"hi"}}`, []string{"text"}, false},
		{"as a value", `{"a":"text"}`, []string{"text"}, false},
		{"escaped key", `{"te\u0078t":1}`, []string{"text"}, true},
		{"other case", `{"TEXT":1}`, []string{"text"}, false},
		{"array", `["text"]`, []string{"text"}, false},
		{"null value counts", `{"text":null}`, []string{"text"}, true},
		{"repeated key", `{"text":1,"text":2}`, []string{"text"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentHasKeys([]byte(tc.args), tc.required); got != tc.want {
				t.Errorf("agentHasKeys(%s, %q) = %t, want %t", tc.args, tc.required, got, tc.want)
			}
		})
	}
}

func FuzzAgentHasKeys(f *testing.F) {
	f.Add(`{"text":"hi","n":{"text":1}}`, "text")
	f.Add(`{"a\u0062":[1,{"ab":2}]}`, "ab")
	f.Fuzz(func(t *testing.T, args, key string) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(args), &m) != nil || m == nil {
			return // not an object: Bind decodes it and says so
		}
		_, want := m[key]
		if got := agentHasKeys([]byte(args), []string{key}); got != want {
			t.Fatalf("agentHasKeys(%s, %q) = %t; a map decode says %t", args, key, got, want)
		}
	})
}
