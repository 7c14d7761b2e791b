package expertagent

import (
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

// agentRefDecodeRequest is the decoding the Agent did before agent_json.go,
// with encoding/json alone: the reference.
func agentRefDecodeRequest(payload []byte) (Envelope, jsonrpc.Message, bool) {
	var env Envelope
	var msg jsonrpc.Message
	if len(payload) > MaxEnvelopeSize || json.Unmarshal(payload, &env) != nil ||
		env.V != EnvelopeVersion || env.CorrelationID == "" || len(env.Message) == 0 || env.Message[0] != '{' {
		return Envelope{}, jsonrpc.Message{}, false
	}
	if json.Unmarshal(env.Message, &msg) != nil {
		return Envelope{}, jsonrpc.Message{}, false
	}
	return env, msg, true
}

// agentJSONSeeds are payloads for the request decoder: well-formed ones,
// and every trap of encoding/json's rules the decoder must copy.
var agentJSONSeeds = []string{
	`{"v":1,"correlationId":"c-1","deadline":1764000000000,"caller":{"userId":"bench","readOnly":false},` +
		`"message":{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":7,"method":"ping"}}`,
	` { "v" : 1 , "correlationId" : "x" , "message" : { "jsonrpc" : "2.0" , "id" : [ 1 , { "a" : null } ] , "method" : "ping" } } `,
	`{"V":1,"CORRELATIONID":"x","Message":{"JSONRPC":"2.0","ID":1,"Method":"ping"}}`,
	`{"\u0076":1,"correlation\u0049d":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"correlationId":"x\u00e9\ud800\n","message":{"jsonrpc":"2.0","id":"\u003c","method":"p\u0069ng"}}`,
	"{\"v\":1,\"correlationId\":\"bad \xff utf8\",\"message\":{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}}",
	`{"v":1,"correlationId":"x","caller":{"userId":"u","scopes":["a","b"],"readOnly":true},"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"correlationId":"x","caller":{"scopes":["a","b"]},"caller":{"scopes":[null],"readOnly":null},"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"correlationId":"x","caller":{"scopes":[]},"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"correlationId":"x","caller":null,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":7},"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"},"message":{"jsonrpc":"2.0","id":1,"method":7}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"},"message":"ping"}`,
	`{"v":1,"correlationId":"x","message":null}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":null,"method":"notifications/initialized","params":null}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","result":{}}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","method":"ping","error":"bad"}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","error":{"code":1.5,"message":"m"}}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","error":{"code":-32000,"message":"m","data":[1]}}}`,
	`{"v":1.0,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1e0,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":"1","correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":null,"v":1,"correlationId":"x","deadline":null,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"correlationId":"x","deadline":99999999999999999999,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"correlationId":"x","deadline":-0,"extra":[1,2,{"a":[true,false,null,-1.5e+3]}],"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":01,"method":"ping"}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}} x`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping",}}`,
	`{"v":1,"correlationId":"x","agent":"other","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`null`, `null x`, `[1,2]`, `"s"`, ``, `hello`, `{`, `{"v":1,`, `{"v":1}}`,
	"{\"v\":1,\"correlationId\":\"a\tb\",\"message\":{}}",
	strings.Repeat("[", 20000),
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping","params":` +
		strings.Repeat("[", 9997) + strings.Repeat("]", 9997) + `}}`,
	`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping","params":` +
		strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}}`,
}

func TestAgentDecodeRequestMatchesEncodingJSON(t *testing.T) {
	for _, in := range agentJSONSeeds {
		agentCheckDecodeRequest(t, []byte(in))
	}
}

func FuzzAgentDecodeRequest(f *testing.F) {
	_, requests := longStringPayloads()
	for _, in := range append(agentJSONSeeds, requests...) {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, payload []byte) { agentCheckDecodeRequest(t, payload) })
}

func agentCheckDecodeRequest(t *testing.T, payload []byte) {
	t.Helper()
	wantEnv, wantMsg, ok := agentRefDecodeRequest(payload)
	var env Envelope
	var msg jsonrpc.Message
	err := agentDecodeRequest(payload, &env, &msg)
	if (err == nil) != ok {
		t.Fatalf("%.200q: agentDecodeRequest error %v, encoding/json accepts: %v", payload, err, ok)
	}
	if !ok {
		return
	}
	if !reflect.DeepEqual(env, wantEnv) {
		t.Fatalf("%.200q: envelope\n got %+v (caller %+v)\nwant %+v (caller %+v)", payload, env, env.Caller, wantEnv, wantEnv.Caller)
	}
	if !reflect.DeepEqual(msg, wantMsg) {
		t.Fatalf("%.200q: message\n got %+v\nwant %+v", payload, msg, wantMsg)
	}
}

var agentParamsSeeds = []string{
	`{"name":"echo","arguments":{"text":"hi"}}`,
	`{"name":"echo","arguments":null,"_meta":{"progressToken":"p-1"},"protocolVersion":"2025-11-25"}`,
	`{"NAME":"e\u0063ho","_Meta":{"ProgressToken":7},"_meta":null}`,
	`{"_meta":{"progressToken":null,"other":[1]},"extra":{"a":"b"}}`,
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
	b, err := json.Marshal(&Envelope{V: EnvelopeVersion, CorrelationID: corrID, Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAgentDecodeRequestRawMembersAreCapped: raw members point into the
// payload; appending to one must not overwrite the bytes after it (here the
// id, which follows params).
func TestAgentDecodeRequestRawMembersAreCapped(t *testing.T) {
	payload := []byte(`{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","method":"tools/call",` +
		`"params":{"name":"echo","arguments":{"text":"a"}},"id":"id-1"}}`)
	var env Envelope
	var msg jsonrpc.Message
	if err := agentDecodeRequest(payload, &env, &msg); err != nil {
		t.Fatal(err)
	}
	var p agentParams
	if err := agentDecodeParams(msg.Params, &p); err != nil {
		t.Fatal(err)
	}
	_ = append(msg.Params, strings.Repeat("X", 64)...)
	_ = append(p.Arguments, strings.Repeat("Y", 64)...)
	_ = append(env.Message, strings.Repeat("Z", 64)...)
	if string(msg.ID) != `"id-1"` || !json.Valid(payload) {
		t.Fatalf("id %s, payload %s", msg.ID, payload)
	}
}

// agentSameJSON reports whether a and b are the same JSON value.
func agentSameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
