package contract

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/jsonrpc"
)

// slowDecode is what the fast decoder must agree with: encoding/json on
// the envelope, then on its message.
func slowDecode(payload []byte) (env Envelope, m jsonrpc.Message, envOK, msgOK bool) {
	envOK = json.Unmarshal(payload, &env) == nil
	if envOK {
		msgOK = json.Unmarshal(env.Message, &m) == nil
	}
	return env, m, envOK, msgOK
}

// checkFastDecode fails t if the fast decoder accepts payload and decodes it
// differently from encoding/json. It reports whether it accepted.
func checkFastDecode(t *testing.T, payload []byte) bool {
	t.Helper()
	env, m, envOK, msgOK := slowDecode(payload)

	var fenv Envelope
	if decodeEnvelopeFast(payload, &fenv, nil) {
		if !envOK {
			t.Fatalf("fast decoder accepted %q, encoding/json refuses it", payload)
		}
		if !reflect.DeepEqual(fenv, env) {
			t.Fatalf("envelope of %q:\nfast %#v\njson %#v", payload, fenv, env)
		}
	}

	var fenv2 Envelope
	var fm jsonrpc.Message
	if !decodeEnvelopeFast(payload, &fenv2, &fm) {
		return false
	}
	if !envOK || !msgOK {
		t.Fatalf("fast decoder accepted %q with its message, encoding/json refuses it", payload)
	}
	if !reflect.DeepEqual(fenv2, env) {
		t.Fatalf("envelope of %q (with message):\nfast %#v\njson %#v", payload, fenv2, env)
	}
	if !reflect.DeepEqual(fm, m) {
		t.Fatalf("message of %q:\nfast %#v\njson %#v", payload, fm, m)
	}
	return true
}

func TestFastDecodeAgreesWithEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload string
		fast    bool // the fast path must take it (the common shapes)
	}{
		{"reply", `{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","result":{"content":[{"type":"text","text":"hi"}]}}}`, true},
		{"request", `{"v":2,"correlationId":"c-1","deadline":1764108000000,"caller":{"userId":"u1","scopes":["tools:call","x"],"readOnly":true},"message":{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}}`, true},
		{"error reply", `{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","error":{"code":-32601,"message":"no such method","data":{"a":[1,2.5e3,null,true,false]}}}}`, true},
		{"notification", `{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":0.5}}}`, true},
		{"whitespace", " \t\n{ \"v\" : 1 , \"correlationId\" : \"c\" , \"message\" : { \"jsonrpc\" : \"2.0\" , \"id\" : 7 , \"result\" : null } } \r\n", true},
		{"unknown members", `{"x":{"y":[{"z":"\u00e9\n"}]},"v":2,"correlationId":"c","message":{"jsonrpc":"2.0","id":1,"result":{},"extra":"\"q\""},"more":-0.0e-0}`, true},
		{"empty scopes", `{"v":2,"correlationId":"c","caller":{"userId":"u","scopes":[],"readOnly":false},"message":{}}`, true},
		{"null caller and error", `{"v":2,"correlationId":"c","caller":null,"message":{"jsonrpc":"2.0","id":"c","result":1,"error":null}}`, true},
		{"utf-8 id", `{"v":2,"correlationId":"c-é-😀","message":{"jsonrpc":"2.0","id":"c","result":"ü"}}`, true},
		{"agent", `{"v":2,"correlationId":"c","agent":"echo","message":{"jsonrpc":"2.0","id":"c","result":{}}}`, true},

		{"escaped string", `{"v":2,"correlationId":"c\n","message":{}}`, false},
		{"escaped key", `{"v":2,"correlation\u0049d":"c","message":{}}`, false},
		{"folded key", `{"V":1,"correlationid":"c","message":{}}`, false},
		{"folded message key", `{"v":2,"correlationId":"c","message":{"JSONRPC":"2.0","ID":"c"}}`, false},
		{"kelvin key", "{\"v\":1,\"correlationId\":\"c\",\"message\":{},\"\u212a\":1}", false},
		{"duplicate", `{"v":2,"v":2,"correlationId":"c","message":{}}`, false},
		{"duplicate message", `{"v":2,"correlationId":"c","message":{},"message":{"a":1}}`, false},
		{"float version", `{"v":1.0,"correlationId":"c","message":{}}`, false},
		{"exp version", `{"v":1e0,"correlationId":"c","message":{}}`, false},
		{"huge version", `{"v":123456789012345678901234567890,"correlationId":"c","message":{}}`, false},
		{"string version", `{"v":"1","correlationId":"c","message":{}}`, false},
		{"null version", `{"v":null,"correlationId":"c","message":{}}`, false},
		{"null message", `{"v":2,"correlationId":"c","message":null}`, false},
		{"array message", `{"v":2,"correlationId":"c","message":[]}`, false},
		{"no message", `{"v":2,"correlationId":"c"}`, false},
		{"numeric jsonrpc", `{"v":2,"correlationId":"c","message":{"jsonrpc":2}}`, false},
		{"float code", `{"v":2,"correlationId":"c","message":{"jsonrpc":"2.0","error":{"code":1.5,"message":"x"}}}`, false},
		{"bad utf-8", "{\"v\":1,\"correlationId\":\"c\xff\",\"message\":{}}", false},
		{"bad utf-8 inside raw", "{\"v\":1,\"correlationId\":\"c\",\"message\":{\"jsonrpc\":\"2.0\",\"result\":\"\xff\"}}", true},
		{"trailing garbage", `{"v":2,"correlationId":"c","message":{}} x`, false},
		{"two values", `{"v":2,"correlationId":"c","message":{}}{}`, false},
		{"truncated", `{"v":2,"correlationId":"c","message":{"jsonrpc":"2.0"`, false},
		{"bad escape", `{"v":2,"correlationId":"c","message":{"a":"\x"}}`, false},
		{"bad unicode escape", `{"v":2,"correlationId":"c","message":{"a":"\u12g4"}}`, false},
		{"control char", "{\"v\":1,\"correlationId\":\"c\",\"message\":{\"a\":\"\x01\"}}", false},
		{"leading zero", `{"v":01,"correlationId":"c","message":{}}`, false},
		{"bad literal", `{"v":2,"correlationId":"c","message":{"a":tru}}`, false},
		{"trailing comma", `{"v":2,"correlationId":"c","message":{"a":1,}}`, false},
		{"deep", `{"v":2,"correlationId":"c","message":{"a":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}}`, false},
		{"not an object", `[1]`, false},
		{"null", `null`, false},
		{"empty", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkFastDecode(t, []byte(tc.payload))
			if tc.fast && !got {
				t.Fatalf("fast decoder declined %q", tc.payload)
			}
		})
	}
}

func FuzzFastDecode(f *testing.F) {
	for _, s := range []string{
		`{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","result":{}}}`,
		`{"v":2,"correlationId":"c-1","deadline":17,"caller":{"userId":"u","scopes":["a"],"readOnly":true},"agent":"x","message":{"jsonrpc":"2.0","id":"c-1","method":"m","params":[1,"2",{"3":null}]}}`,
		`{"v":2,"correlationId":"c","message":{"jsonrpc":"2.0","id":"c","error":{"code":-1,"message":"m","data":[true,false,-1.5e+3]}}}`,
		`{"V":1,"correlationid":"c","message":{"ID":1}}`,
		`{"v":2,"v":2}`, `{"a":"\u00e9\"\\"}`, "\xff", `{"v":1e400}`,
	} {
		f.Add([]byte(s))
	}
	replies, _ := longStringPayloads()
	for _, s := range replies {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		checkFastDecode(t, payload)
	})
}

func TestAppendJSONStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "c-abc-1", "tools/call", `a"b`, `a\b`, "<b>&", "\n\t\x00", "é😀", "\u2028\u2029", "\xff\xfe", "a\xc3"} {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("c-1")
	f.Add("<\xff\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	})
}

// legacyEnvelope is the envelope as json.Marshal wrote it before the
// appending encoder (Encode took it over).
func legacyEncode(t *testing.T, e Envelope) []byte {
	t.Helper()
	e.V = EnvelopeVersion
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeMatchesMarshal(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  Envelope
	}{
		{"minimal", Envelope{CorrelationID: "c-1", Message: json.RawMessage(`{"jsonrpc":"2.0","id":"c-1","result":{}}`)}},
		{"full", Envelope{CorrelationID: "c-1", Deadline: 1764108000000, Caller: &Caller{UserID: "u<1>", Scopes: []string{"a", "b\n"}, ReadOnly: true}, Agent: "echo", Message: json.RawMessage(" {\n \"a\" : [1, 2] }\n")}},
		{"empty scopes", Envelope{CorrelationID: "c", Caller: &Caller{UserID: "u", Scopes: []string{}}, Message: json.RawMessage(`{}`)}},
		{"nil message", Envelope{CorrelationID: "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env
			got, err := env.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if env.V != EnvelopeVersion {
				t.Fatalf("Encode left V = %d", env.V)
			}
			if want := legacyEncode(t, tc.env); !bytes.Equal(got, want) {
				t.Fatalf("Encode = %s\nwant     %s", got, want)
			}
		})
	}
	t.Run("invalid message", func(t *testing.T) {
		for _, msg := range []string{"", "{", `{"a":1} x`, "nul"} {
			env := Envelope{CorrelationID: "c", Message: json.RawMessage(msg)}
			if _, err := env.Encode(); err == nil {
				t.Errorf("Encode accepted message %q", msg)
			}
		}
	})
}

func TestAppendRequestEnvelope(t *testing.T) {
	type legacyRequest struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      string          `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params,omitempty"`
	}
	caller := &Caller{UserID: "u1", Scopes: []string{"tools:call"}}
	for _, params := range []string{"", `{"name":"echo","arguments":{"text":"hi"}}`, " [1, {\"a\" : \"<&>\"}] "} {
		got, err := AppendRequest(nil, "c-x-1", 1764108000000, caller, "tools/call", []byte(params))
		if err != nil {
			t.Fatalf("params %q: %v", params, err)
		}
		msg, err := json.Marshal(legacyRequest{JSONRPC: "2.0", ID: "c-x-1", Method: "tools/call", Params: json.RawMessage(params)})
		if err != nil {
			t.Fatal(err)
		}
		want := legacyEncode(t, Envelope{CorrelationID: "c-x-1", Deadline: 1764108000000, Caller: caller, Message: msg})
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("params %q: output %s is not JSON: %v", params, got, err)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("params %q:\ngot  %s\nwant %s", params, got, want)
		}
		if !strings.Contains(params, "<") && !bytes.Equal(got, want) {
			t.Fatalf("params %q: bytes differ:\ngot  %s\nwant %s", params, got, want)
		}
	}
	for _, params := range []string{"{", `{"a":1} x`, "nul", " "} {
		if _, err := AppendRequest(nil, "c", 0, nil, "m", []byte(params)); err == nil {
			t.Errorf("params %q accepted", params)
		}
	}
}

func TestIsCompactJSON(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{`{"name":"echo","arguments":{"text":"a b"}}`, true},
		{`[1,-2.5e+3,"\u00e9\n",true,false,null,{}]`, true},
		{`"x"`, true},
		{`{"a": 1}`, false},
		{" {}", false},
		{"{}\n", false},
		{`{"a":1}x`, false},
		{`{"a":}`, false},
		{"", false},
	} {
		if got := isCompactJSON([]byte(tc.raw)); got != tc.want {
			t.Errorf("isCompactJSON(%q) = %t, want %t", tc.raw, got, tc.want)
		}
	}
}

// FuzzIsCompactJSON: what the check passes through untouched is exactly
// what json.Compact would have written.
func FuzzIsCompactJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `{"a": 1}`, `"\ud800"`, "\"\xff\"", `1e5`, `-0.0`, `[`, `{"a":1,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !isCompactJSON(raw) {
			return
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			t.Fatalf("isCompactJSON(%q) but json.Compact: %v", raw, err)
		}
		if !bytes.Equal(buf.Bytes(), raw) {
			t.Fatalf("isCompactJSON(%q) but json.Compact wrote %q", raw, buf.Bytes())
		}
	})
}
