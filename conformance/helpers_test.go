package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/requester"
)

// testWait bounds every single wait of a test.
const testWait = 10 * time.Second

// allCaps are the client capabilities the 2026-07-28 scenarios declare by
// default.
const allCaps = `{"sampling":{},"elicitation":{},"roots":{"listChanged":true}}`

// fx is the fixture served by a real Agent on the real embedded broker,
// called the way the gateway calls it: a Requester over the broker's
// inline bus.
type fx struct {
	req   *requester.Requester
	ctx   contract.Context
	agent string // the fixture agent's name on the bus
}

// startFixture runs an Agent with the fixture registered with opts, and a
// Requester to call it; both stop at cleanup.
func startFixture(t *testing.T, opts Options) *fx {
	t.Helper()
	env := testenv.StartBroker(t, testenv.WithLogLevel(logrus.InfoLevel))
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: env.URL, Username: env.AgentUser, Password: env.AgentPassword,
		Name: "conformance", Version: "test", ConnectTimeout: 5 * time.Second, ShutdownTimeout: 2 * time.Second,
		Logger: testenv.LoggerAt(t, "agent", logrus.InfoLevel),
	})
	if opts.Logger == nil {
		opts.Logger = testenv.LoggerAt(t, "", logrus.DebugLevel)
	}
	if err := Register(a, opts); err != nil {
		t.Fatalf("register: %v", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent run: %v", err)
			}
		case <-time.After(3 * testWait):
			t.Error("agent did not stop")
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent stopped before ready: %v", err)
	case <-time.After(testWait):
		t.Fatal("agent not ready in time")
	}

	r := requester.New(env.Broker.Bus(), requester.Options{
		CallTimeout: testWait, Logger: testenv.LoggerAt(t, "requester", logrus.InfoLevel)})
	if err := r.Start(testenv.Context(t, testWait)); err != nil {
		t.Fatalf("start requester: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("close requester: %v", err)
		}
	})
	return &fx{req: r, agent: env.AgentUser, ctx: contract.Context{PlatformID: "gw1", UserID: "u1", SessionID: "s1",
		EntityType: contract.NoEntity, EntityID: contract.NoEntity}}
}

// reply is the final answer to a request and the notifications before it.
type reply struct {
	msg     *jsonrpc.Message
	interim []*jsonrpc.Message
}

// request sends method with raw params for caller user ("" = no caller).
func (f *fx) request(t *testing.T, user, method, params string) *reply {
	t.Helper()
	var caller *contract.Caller
	if user != "" {
		caller = &contract.Caller{UserID: user, Scopes: []string{"tools:call"}}
	}
	var (
		mu  sync.Mutex
		out reply
	)
	var raw json.RawMessage
	if params != "" {
		raw = json.RawMessage(params)
	}
	msg, err := f.req.Request(testenv.Context(t, testWait), f.ctx, f.agent, caller, method, raw, func(_ string, m *jsonrpc.Message) {
		mu.Lock()
		out.interim = append(out.interim, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("%s %s: %v", method, params, err)
	}
	mu.Lock()
	defer mu.Unlock()
	out.msg = msg
	return &out
}

// call describes a tools/call or prompts/get request.
type call struct {
	Args      string // raw arguments; "" = no arguments member
	Caps      string // raw clientCapabilities; "" = allCaps, "none" = no _meta member at all
	LogLevel  string
	Progress  string // raw progress token
	Responses string // raw inputResponses
	State     string // requestState, a JSON string
	StateRaw  string // raw requestState (to send a wrong type)
	User      string // caller; "" = "u1"
}

// params encodes c for tool or prompt name.
func (c call) params(t *testing.T, name string) string {
	t.Helper()
	p := map[string]json.RawMessage{}
	p["name"], _ = json.Marshal(name)
	if c.Args != "" {
		p["arguments"] = json.RawMessage(c.Args)
	}
	if c.Caps != "none" {
		meta := map[string]json.RawMessage{"io.modelcontextprotocol/protocolVersion": json.RawMessage(`"2026-07-28"`)}
		caps := c.Caps
		if caps == "" {
			caps = allCaps
		}
		meta[metaClientCapabilities] = json.RawMessage(caps)
		if c.LogLevel != "" {
			meta[metaLogLevel], _ = json.Marshal(c.LogLevel)
		}
		if c.Progress != "" {
			meta["progressToken"] = json.RawMessage(c.Progress)
		}
		p["_meta"], _ = json.Marshal(meta)
	}
	if c.Responses != "" {
		p["inputResponses"] = json.RawMessage(c.Responses)
	}
	if c.State != "" {
		p["requestState"], _ = json.Marshal(c.State)
	}
	if c.StateRaw != "" {
		p["requestState"] = json.RawMessage(c.StateRaw)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("params: %v", err)
	}
	return string(b)
}

func (f *fx) tool(t *testing.T, name string, c call) *reply {
	t.Helper()
	user := c.User
	if user == "" {
		user = "u1"
	}
	return f.request(t, user, "tools/call", c.params(t, name))
}

func (f *fx) prompt(t *testing.T, name string, c call) *reply {
	t.Helper()
	user := c.User
	if user == "" {
		user = "u1"
	}
	return f.request(t, user, "prompts/get", c.params(t, name))
}

// result is the reply's result; a JSON-RPC error fails the test.
func (r *reply) result(t *testing.T) json.RawMessage {
	t.Helper()
	if r.msg.Error != nil {
		t.Fatalf("JSON-RPC error %d %s (data %s), want a result", r.msg.Error.Code, r.msg.Error.Message, r.msg.Error.Data)
	}
	return r.msg.Result
}

// rpcErr is the reply's JSON-RPC error; a result fails the test.
func (r *reply) rpcErr(t *testing.T, code int) *jsonrpc.Error {
	t.Helper()
	if r.msg.Error == nil {
		t.Fatalf("result %s, want JSON-RPC error %d", r.msg.Result, code)
	}
	if r.msg.Error.Code != code {
		t.Fatalf("JSON-RPC error %d %q, want code %d", r.msg.Error.Code, r.msg.Error.Message, code)
	}
	return r.msg.Error
}

// toolResult is a complete tools/call result.
type toolResult struct {
	ResultType *string `json:"resultType"`
	Content    []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Data     string `json:"data"`
		MimeType string `json:"mimeType"`
	} `json:"content"`
	IsError bool `json:"isError"`
}

// text is the text of a complete, successful tools/call result with one
// text content.
func (r *reply) text(t *testing.T) string {
	t.Helper()
	raw := r.result(t)
	var res toolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	if res.ResultType != nil || res.IsError || len(res.Content) != 1 || res.Content[0].Type != "text" {
		t.Fatalf("result %s: want a complete result with one text content", raw)
	}
	return res.Content[0].Text
}

// wantText checks that the result is a text containing want.
func (r *reply) wantText(t *testing.T, want string) {
	t.Helper()
	if got := r.text(t); !strings.Contains(got, want) {
		t.Fatalf("text %q, want one containing %q", got, want)
	}
}

// inputRequiredWire decodes an input_required result, requests raw.
type inputRequiredWire struct {
	ResultType    string `json:"resultType"`
	InputRequests map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	} `json:"inputRequests"`
	RequestState *string `json:"requestState"`
}

// inputRequired is the reply's input_required result; it must ask for
// exactly keys (sorted or not).
func (r *reply) inputRequired(t *testing.T, keys ...string) *inputRequiredWire {
	t.Helper()
	raw := r.result(t)
	var ir inputRequiredWire
	if err := json.Unmarshal(raw, &ir); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	if ir.ResultType != "input_required" {
		t.Fatalf("result %s: want resultType input_required", raw)
	}
	if len(ir.InputRequests) != len(keys) {
		t.Fatalf("result %s: want input requests %q", raw, keys)
	}
	for _, k := range keys {
		if _, ok := ir.InputRequests[k]; !ok {
			t.Fatalf("result %s: no input request %q", raw, k)
		}
	}
	return &ir
}

// state is the requestState of an input_required result; it must have one.
func (ir *inputRequiredWire) state(t *testing.T) string {
	t.Helper()
	if ir.RequestState == nil || *ir.RequestState == "" {
		t.Fatal("input_required result has no requestState")
	}
	return *ir.RequestState
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

// wantJSON fails unless got is the JSON value want.
func wantJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	if !jsonEqual(t, got, []byte(want)) {
		t.Fatalf("%s = %s\nwant %s", what, got, want)
	}
}

// notifications are the interim messages of method.
func (r *reply) notifications(method string) []json.RawMessage {
	var out []json.RawMessage
	for _, m := range r.interim {
		if m.Method == method {
			out = append(out, m.Params)
		}
	}
	return out
}

// elicitAccept is the inputResponses entry of an accepted form.
func elicitAccept(content string) string { return `{"action":"accept","content":` + content + `}` }

// samplingAnswer is the inputResponses entry of a sampling answer.
func samplingAnswer(text string) string {
	b, _ := json.Marshal(text)
	return `{"role":"assistant","content":{"type":"text","text":` + string(b) + `},"model":"test-model","stopReason":"endTurn"}`
}

const rootsAnswer = `{"roots":[{"uri":"file:///test/root","name":"Test Root"}]}`

// errorsAsRPC is errors.As for *jsonrpc.Error.
func errorsAsRPC(err error) (*jsonrpc.Error, bool) {
	var e *jsonrpc.Error
	ok := errors.As(err, &e)
	return e, ok
}
