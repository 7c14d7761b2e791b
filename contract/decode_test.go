package contract

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/jsonrpc"
)

// Decode must accept and fill exactly what encoding/json does. These tests
// compare the two on fixed cases and, as fuzz targets, on whatever the
// fuzzer finds.

// refDecode is Decode with encoding/json alone: the reference.
func refDecode(payload []byte) (Envelope, jsonrpc.Message, bool) {
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

// decodeSeeds are payloads for the request decoder: well-formed ones,
// and every trap of encoding/json's rules the decoder must copy.
var decodeSeeds = []string{
	`{"v":2,"correlationId":"c-1","deadline":1764000000000,"caller":{"userId":"bench","readOnly":false},` +
		`"message":{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":7,"method":"ping"}}`,
	` { "v" : 1 , "correlationId" : "x" , "message" : { "jsonrpc" : "2.0" , "id" : [ 1 , { "a" : null } ] , "method" : "ping" } } `,
	`{"V":1,"CORRELATIONID":"x","Message":{"JSONRPC":"2.0","ID":1,"Method":"ping"}}`,
	`{"\u0076":1,"correlation\u0049d":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x\u00e9\ud800\n","message":{"jsonrpc":"2.0","id":"\u003c","method":"p\u0069ng"}}`,
	"{\"v\":1,\"correlationId\":\"bad \xff utf8\",\"message\":{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}}",
	`{"v":2,"correlationId":"x","caller":{"userId":"u","scopes":["a","b"],"readOnly":true},"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","caller":{"scopes":["a","b"]},"caller":{"scopes":[null],"readOnly":null},"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","caller":{"scopes":[]},"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","caller":null,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":7},"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"},"message":{"jsonrpc":"2.0","id":1,"method":7}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"},"message":"ping"}`,
	`{"v":2,"correlationId":"x","message":null}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":null,"method":"notifications/initialized","params":null}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","result":{}}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","method":"ping","error":"bad"}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","error":{"code":1.5,"message":"m"}}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","error":{"code":-32000,"message":"m","data":[1]}}}`,
	`{"v":1.0,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":1e0,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":"1","correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":null,"v":2,"correlationId":"x","deadline":null,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","deadline":99999999999999999999,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","deadline":-0,"extra":[1,2,{"a":[true,false,null,-1.5e+3]}],"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":01,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}} x`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping",}}`,
	`{"v":2,"correlationId":"x","agent":"other","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`{"v":2,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`,
	`null`, `null x`, `[1,2]`, `"s"`, ``, `hello`, `{`, `{"v":2,`, `{"v":2}}`,
	"{\"v\":1,\"correlationId\":\"a\tb\",\"message\":{}}",
	strings.Repeat("[", 20000),
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping","params":` +
		strings.Repeat("[", 9997) + strings.Repeat("]", 9997) + `}}`,
	`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping","params":` +
		strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}}`,
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, in := range decodeSeeds {
		checkDecode(t, []byte(in))
	}
}

func FuzzDecode(f *testing.F) {
	_, requests := longStringPayloads()
	for _, in := range append(decodeSeeds, requests...) {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, payload []byte) { checkDecode(t, payload) })
}

func checkDecode(t *testing.T, payload []byte) {
	t.Helper()
	wantEnv, wantMsg, ok := refDecode(payload)
	var env Envelope
	var msg jsonrpc.Message
	err := Decode(payload, &env, &msg)
	if (err == nil) != ok {
		t.Fatalf("%.200q: Decode error %v, encoding/json accepts: %v", payload, err, ok)
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

// TestDecodeRawMembersAreCapped: raw members point into the
// payload; appending to one must not overwrite the bytes after it (here the
// id, which follows params).
func TestDecodeRawMembersAreCapped(t *testing.T) {
	payload := []byte(`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","method":"tools/call",` +
		`"params":{"name":"echo","arguments":{"text":"a"}},"id":"id-1"}}`)
	var env Envelope
	var msg jsonrpc.Message
	if err := Decode(payload, &env, &msg); err != nil {
		t.Fatal(err)
	}
	var p struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(msg.Params, &p); err != nil {
		t.Fatal(err)
	}
	_ = append(msg.Params, strings.Repeat("X", 64)...)
	_ = append(p.Arguments, strings.Repeat("Y", 64)...)
	_ = append(env.Message, strings.Repeat("Z", 64)...)
	if string(msg.ID) != `"id-1"` || !json.Valid(payload) {
		t.Fatalf("id %s, payload %s", msg.ID, payload)
	}
}
