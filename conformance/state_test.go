package conformance

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/expertagent"
)

func testFixture(t testing.TB, opts Options) *fixture {
	t.Helper()
	f, err := newFixture(opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestStateSealOpen(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	f := testFixture(t, Options{StateKey: bytes.Repeat([]byte{7}, 32), now: func() time.Time { return now }})
	b := binding{target: "tools/call t", args: argsDigest(nil), user: "u1"}
	p := statePayload{Target: b.target, Args: b.args, User: b.user, Round: 2, Expires: f.expiry(), Data: map[string]string{"name": "Alice"}}
	state := f.seal(p)

	got, err := f.open(state, b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Round != 2 || got.Data["name"] != "Alice" {
		t.Fatalf("payload %+v", got)
	}

	other := testFixture(t, Options{StateKey: bytes.Repeat([]byte{8}, 32), now: func() time.Time { return now }})
	body, sig, _ := strings.Cut(state, ".")
	forged := func(mut func(*statePayload)) string {
		q := p
		mut(&q)
		return f.seal(q)
	}
	tests := []struct {
		name, state string
		bind        binding
		other       *fixture
		wantExpired bool
	}{
		{name: "suffix", state: state + "-TAMPERED"},
		{name: "body changed", state: flipFirst(body) + "." + sig},
		{name: "signature changed", state: body + "." + flipFirst(sig)},
		{name: "no signature", state: body},
		{name: "empty", state: ""},
		{name: "dot only", state: "."},
		{name: "too long", state: strings.Repeat("A", maxStateLen+1)},
		{name: "other key", state: state, other: other},
		{name: "other target", state: state, bind: binding{target: "tools/call u", args: b.args, user: b.user}},
		{name: "other args", state: state, bind: binding{target: b.target, args: argsDigest(json.RawMessage(`{"a":1}`)), user: b.user}},
		{name: "other user", state: state, bind: binding{target: b.target, args: b.args, user: "u2"}},
		{name: "round 0", state: forged(func(q *statePayload) { q.Round = 0 })},
		{name: "expired", state: forged(func(q *statePayload) { q.Expires = now.UnixMilli() - 1 }), wantExpired: true},
		{name: "signed garbage body", state: "bm90IGpzb24." + base64URL(f.mac("bm90IGpzb24"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, bind := f, b
			if tc.other != nil {
				g = tc.other
			}
			if tc.bind.target != "" {
				bind = tc.bind
			}
			_, err := g.open(tc.state, bind)
			if !errors.Is(err, errBadState) {
				t.Fatalf("open = %v, want errBadState", err)
			}
			if errors.Is(err, errStateExpired) != tc.wantExpired {
				t.Fatalf("open = %v, expired %v", err, tc.wantExpired)
			}
		})
	}
}

func TestArgsDigest(t *testing.T) {
	same := []string{"", "null", "{}", " { } "}
	for _, a := range same {
		if argsDigest(json.RawMessage(a)) != argsDigest(nil) {
			t.Errorf("digest of %q differs from no arguments", a)
		}
	}
	if argsDigest(json.RawMessage(`{"a":1,"b":[1,2]}`)) != argsDigest(json.RawMessage(`{ "b":[1, 2], "a":1 }`)) {
		t.Error("member order changes the digest")
	}
	for _, pair := range [][2]string{{`{"a":1}`, `{"a":2}`}, {`{"a":1}`, `{"a":"1"}`}, {`{"a":1}`, `{}`}, {`{"n":12345678901234567890}`, `{"n":12345678901234567891}`}} {
		if argsDigest(json.RawMessage(pair[0])) == argsDigest(json.RawMessage(pair[1])) {
			t.Errorf("%s and %s have the same digest", pair[0], pair[1])
		}
	}
}

func TestRegisterOptions(t *testing.T) {
	newAgent := func() *expertagent.Agent {
		return expertagent.NewAgent(expertagent.AgentOptions{BrokerURL: "tcp://127.0.0.1:1"})
	}
	if err := Register(newAgent(), Options{StateKey: []byte("short")}); !errors.Is(err, ErrOptions) {
		t.Errorf("short key: %v, want ErrOptions", err)
	}
	if err := Register(nil, Options{}); !errors.Is(err, ErrOptions) {
		t.Errorf("nil agent: %v, want ErrOptions", err)
	}
	a := newAgent()
	if err := Register(a, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := Register(a, Options{}); !errors.Is(err, expertagent.ErrDuplicateTool) {
		t.Errorf("second Register: %v, want ErrDuplicateTool", err)
	}

	key := bytes.Repeat([]byte{1}, MinStateKeyLen)
	f := testFixture(t, Options{StateKey: key})
	key[0] = 2
	if f.opts.StateKey[0] != 1 {
		t.Error("the fixture shares the caller's key slice")
	}
	if f.opts.StateTTL != DefaultStateTTL || f.opts.StepDelay != DefaultStepDelay {
		t.Errorf("defaults %v %v", f.opts.StateTTL, f.opts.StepDelay)
	}
	r1, r2 := testFixture(t, Options{}), testFixture(t, Options{})
	if len(r1.opts.StateKey) != MinStateKeyLen || bytes.Equal(r1.opts.StateKey, r2.opts.StateKey) {
		t.Error("random keys are not random")
	}
}

// TestAgentHandlerFallback checks the ToolHandlers the tools are added
// with, which an Agent without Register's tools/call would run.
func TestAgentHandlerFallback(t *testing.T) {
	f := testFixture(t, Options{})
	for _, ft := range f.toolList() {
		f.tools[ft.tool.Name] = ft
	}
	req := func(name, params string) *expertagent.CallRequest {
		return &expertagent.CallRequest{MethodRequest: expertagent.MethodRequest{Method: "tools/call", Params: json.RawMessage(params)}, Name: name}
	}
	res, err := f.tools["test_simple_text"].tool.Handler(t.Context(), req("test_simple_text", `{"name":"test_simple_text"}`))
	if err != nil || len(res.Content) != 1 || res.Content[0].Text != simpleText {
		t.Fatalf("test_simple_text: %+v, %v", res, err)
	}
	_, err = f.tools["test_input_required_result_elicitation"].tool.Handler(t.Context(),
		req("test_input_required_result_elicitation", `{"name":"test_input_required_result_elicitation","_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}`))
	if e, ok := errorsAsRPC(err); !ok || e.Code != -32603 {
		t.Fatalf("MRTR tool through the Agent's own tools/call: %v, want a -32603 error", err)
	}
}

func TestCapabilities(t *testing.T) {
	tests := []struct {
		meta                  string
		sampling, form, roots bool
		logLevel              string
	}{
		{meta: `{}`},
		{meta: `{"io.modelcontextprotocol/clientCapabilities":{}}`},
		{meta: `{"io.modelcontextprotocol/clientCapabilities":` + allCaps + `}`, sampling: true, form: true, roots: true},
		{meta: `{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}`},
		{meta: `{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}`, form: true},
		{meta: `{"io.modelcontextprotocol/clientCapabilities":{"sampling":true,"roots":null,"elicitation":[]}}`},
		{meta: `{"io.modelcontextprotocol/clientCapabilities":"all"}`},
		{meta: `{"io.modelcontextprotocol/logLevel":"notice"}`, logLevel: "notice"},
		{meta: `{"io.modelcontextprotocol/logLevel":"verbose"}`},
		{meta: `{"io.modelcontextprotocol/logLevel":3}`},
		{meta: `[]`},
	}
	for _, tc := range tests {
		t.Run(tc.meta, func(t *testing.T) {
			m := parseMeta(json.RawMessage(tc.meta))
			if m.caps.sampling() != tc.sampling || m.caps.formElicitation() != tc.form || m.caps.roots() != tc.roots || m.logLevel != tc.logLevel {
				t.Fatalf("sampling %v form %v roots %v level %q", m.caps.sampling(), m.caps.formElicitation(), m.caps.roots(), m.logLevel)
			}
		})
	}
}

func base64URL(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// FuzzOpenState checks that open never panics and accepts only what seal
// made for the same binding.
func FuzzOpenState(f *testing.F) {
	// A fixed clock: the fuzz workers run this setup again and must seal
	// the same state as the seed corpus.
	now := time.UnixMilli(1_800_000_000_000)
	fx := testFixture(f, Options{StateKey: bytes.Repeat([]byte{9}, 32), now: func() time.Time { return now }})
	b := binding{target: "tools/call t", args: argsDigest(nil)}
	good := fx.seal(statePayload{Target: b.target, Args: b.args, Round: 1, Expires: fx.expiry()})
	f.Add(good)
	f.Add(good + "-TAMPERED")
	f.Add("a.b")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := fx.open(s, b)
		if err == nil && (s != good || p.Round != 1) {
			t.Fatalf("accepted %q", s)
		}
	})
}
