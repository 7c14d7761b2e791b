package expertagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
)

// Helpers of the agent-side tests, all prefixed "ag" so that they cannot
// collide with the gateway side's test helpers in this package.

// agWait bounds every single wait of these tests.
const agWait = 10 * time.Second

// agHashIterations keeps the KDF cheap: these tests are about the agent.
const agHashIterations = 1000

// agEnv is a running embedded broker with a real ACL store, and the
// credentials of one expert agent and one platform identity.
type agEnv struct {
	store     *acl.Store
	opts      broker.Options
	broker    *broker.Broker
	url       string
	agentUser string
	agentPass string
	platUser  string
	platPass  string
}

func agContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// agLogger logs to t.Log while the test runs and drops what stragglers log after it.
func agLogger(t testing.TB, component string) *logrus.Entry {
	t.Helper()
	w := &agLogWriter{t: t}
	t.Cleanup(w.stop)
	l := logrus.New()
	l.SetOutput(w)
	l.SetLevel(logrus.DebugLevel)
	return l.WithField("component", component)
}

type agLogWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *agLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *agLogWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// agStartBroker starts the broker on 127.0.0.1:0 over a fresh store, both
// closed by t.Cleanup after everything registered later.
func agStartBroker(t testing.TB) *agEnv {
	t.Helper()
	ctx := agContext(t)
	store, err := acl.Open(ctx, t.TempDir(), acl.StoreOptions{HashIterations: agHashIterations, Logger: agLogger(t, "store")})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	e := &agEnv{store: store, agentUser: "agent1", agentPass: "pw-agent1", platUser: "plat1", platPass: "pw-plat1"}
	if _, err := store.AddIdentity(ctx, e.agentUser, acl.RoleExpertAgent, []byte(e.agentPass)); err != nil {
		t.Fatalf("add agent identity: %v", err)
	}
	if _, err := store.AddIdentity(ctx, e.platUser, acl.RolePlatform, []byte(e.platPass)); err != nil {
		t.Fatalf("add platform identity: %v", err)
	}
	e.opts = broker.Options{
		Addr: "127.0.0.1:0", Authenticator: store, Authorizer: acl.NewPolicy(nil),
		InlineQoS: 1, Logger: agLogger(t, "broker"),
	}
	if err := e.startBroker(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.broker.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	e.url = "tcp://" + e.broker.Addr().String()
	e.opts.Addr = e.broker.Addr().String() // a restart listens where the agents reconnect
	return e
}

func (e *agEnv) startBroker(ctx context.Context) error {
	b, err := broker.New(e.opts)
	if err != nil {
		return fmt.Errorf("new broker: %w", err)
	}
	if err := b.Start(ctx); err != nil {
		_ = b.Close()
		return fmt.Errorf("start broker: %w", err)
	}
	if err := b.Ready(ctx); err != nil {
		_ = b.Close()
		return fmt.Errorf("broker ready: %w", err)
	}
	e.broker = b
	return nil
}

// restartBroker closes the broker and starts a fresh one (no sessions, no
// retained messages) on the same address: every client loses its
// connection and must reconnect and subscribe again.
func (e *agEnv) restartBroker(t testing.TB) {
	t.Helper()
	if err := e.broker.Close(); err != nil {
		t.Fatalf("close broker: %v", err)
	}
	var err error
	agPoll(t, "the broker to listen again on "+e.opts.Addr, func() bool {
		err = e.startBroker(agContext(t))
		return err == nil
	})
}

// agentOptions fills in the broker and the agent identity.
func (e *agEnv) agentOptions(t testing.TB, o expertagent.AgentOptions) expertagent.AgentOptions {
	t.Helper()
	if o.BrokerURL == "" {
		o.BrokerURL = e.url
	}
	if o.Username == "" {
		o.Username, o.Password = e.agentUser, e.agentPass
	}
	if o.Logger == nil {
		o.Logger = agLogger(t, "agent")
	}
	return o
}

// agRunning is an Agent whose Run is in progress.
type agRunning struct {
	*expertagent.Agent
	cancel context.CancelFunc
	done   chan error // Run's result
}

// stop cancels Run and returns its result.
func (r *agRunning) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // later stops (t.Cleanup) see it too
		return err
	case <-time.After(3 * agWait):
		t.Fatal("Run did not return after cancel")
		return nil
	}
}

// startAgent runs an agent with tools until the test ends, and waits until
// it is Ready.
func (e *agEnv) startAgent(t testing.TB, o expertagent.AgentOptions, tools ...expertagent.Tool) *agRunning {
	t.Helper()
	a := expertagent.NewAgent(e.agentOptions(t, o))
	for _, tool := range tools {
		if err := a.AddTool(tool); err != nil {
			t.Fatalf("AddTool(%s): %v", tool.Name, err)
		}
	}
	return agRun(t, a)
}

// agRun starts a.Run and waits until the agent is Ready; t.Cleanup stops it
// and checks that Run returned nil.
func agRun(t testing.TB, a *expertagent.Agent) *agRunning {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &agRunning{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		if err := r.stop(t); err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-r.done:
		t.Fatalf("Run returned before Ready: %v", err)
	case <-time.After(agWait):
		t.Fatal("agent not Ready in time")
	}
	return r
}

// agReply is one message an agent published on a response topic.
type agReply struct {
	env expertagent.Envelope
	msg jsonrpc.Message
	raw string
}

// agCaller plays the gateway over the broker's InlineBus: it publishes
// envelopes on one context's request topic and collects what arrives on
// its response topic, in order.
type agCaller struct {
	env     *agEnv
	ctx     expertagent.Context
	replies chan agReply
	bad     atomic.Int32 // undecodable replies
	seq     atomic.Int64
}

var agContextSeq atomic.Int64

// newCaller subscribes to a fresh context's response topic.
func (e *agEnv) newCaller(t testing.TB) *agCaller {
	t.Helper()
	c := &agCaller{env: e, replies: make(chan agReply, 1024), ctx: expertagent.Context{
		PlatformID: "plat", UserID: "user1",
		SessionID: fmt.Sprintf("sess%d", agContextSeq.Add(1)), EntityType: expertagent.NoEntity, EntityID: expertagent.NoEntity,
	}}
	bus := e.broker.Bus()
	topic := c.ctx.ResponseTopic()
	if err := bus.Subscribe(agContext(t), topic, func(_ string, payload []byte) {
		r := agReply{raw: string(payload)}
		env, err := expertagent.DecodeEnvelope(payload)
		if err == nil {
			r.env = env
			err = json.Unmarshal(env.Message, &r.msg)
		}
		if err != nil {
			c.bad.Add(1)
			return
		}
		select {
		case c.replies <- r:
		default:
			c.bad.Add(1)
		}
	}); err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	t.Cleanup(func() { _ = bus.Unsubscribe(context.Background(), topic) })
	return c
}

// agSendOpts are the envelope fields a test may set.
type agSendOpts struct {
	deadline time.Time
	caller   *expertagent.Caller
	noID     bool // send a notification
}

// send publishes one JSON-RPC message (id = correlation ID) and returns
// the correlation ID.
func (c *agCaller) send(t testing.TB, method string, params any, o agSendOpts) string {
	t.Helper()
	corrID := fmt.Sprintf("c-%d", c.seq.Add(1))
	c.sendAs(t, corrID, method, params, o)
	return corrID
}

func (c *agCaller) sendAs(t testing.TB, corrID, method string, params any, o agSendOpts) {
	t.Helper()
	msg := jsonrpc.Message{JSONRPC: jsonrpc.Version, Method: method}
	if !o.noID {
		msg.ID = json.RawMessage(`"` + corrID + `"`)
	}
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			t.Fatal(err)
		}
		msg.Params = p
	}
	raw, err := json.Marshal(&msg)
	if err != nil {
		t.Fatal(err)
	}
	env := expertagent.Envelope{CorrelationID: corrID, Message: raw, Caller: o.caller}
	if o.caller == nil {
		env.Caller = &expertagent.Caller{UserID: c.ctx.UserID, Scopes: []string{"tools:list", "tools:call"}}
	}
	if !o.deadline.IsZero() {
		env.Deadline = o.deadline.UnixMilli()
	}
	payload, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	c.publishRaw(t, c.ctx.RequestTopic(), payload)
}

func (c *agCaller) publishRaw(t testing.TB, topic string, payload []byte) {
	t.Helper()
	if err := c.env.broker.Bus().Publish(agContext(t), topic, payload); err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
}

// next returns the next reply, failing after agWait.
func (c *agCaller) next(t testing.TB) agReply {
	t.Helper()
	select {
	case r := <-c.replies:
		return r
	case <-time.After(agWait):
		t.Fatal("no reply within", agWait)
		return agReply{}
	}
}

// response returns the next reply, which must be the final response for corrID.
func (c *agCaller) response(t testing.TB, corrID string) agReply {
	t.Helper()
	r := c.next(t)
	if r.env.CorrelationID != corrID || !r.msg.IsResponse() {
		t.Fatalf("next reply = %s, want the response for %s", r.raw, corrID)
	}
	if got := string(r.msg.ID); got != `"`+corrID+`"` {
		t.Fatalf("response id = %s, want %q", got, corrID)
	}
	return r
}

// call sends a request and returns its result, failing on a JSON-RPC error.
func (c *agCaller) call(t testing.TB, method string, params any) json.RawMessage {
	t.Helper()
	r := c.response(t, c.send(t, method, params, agSendOpts{}))
	if r.msg.Error != nil {
		t.Fatalf("%s: error %v", method, r.msg.Error)
	}
	return r.msg.Result
}

// expectNoReply proves that nothing was published for this context so far:
// it pings, and the ping's response must be the next reply (one publisher,
// one subscriber: the broker keeps the order).
func (c *agCaller) expectNoReply(t testing.TB) {
	t.Helper()
	c.call(t, "ping", nil)
}

// agToolResult is a decoded tools/call result.
type agToolResult struct {
	Content           []map[string]any `json:"content"`
	StructuredContent json.RawMessage  `json:"structuredContent"`
	IsError           bool             `json:"isError"`
}

func agDecodeResult(t testing.TB, raw json.RawMessage) agToolResult {
	t.Helper()
	var r agToolResult
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("decode tool result %s: %v", raw, err)
	}
	if r.Content == nil {
		t.Fatalf("tool result %s: content missing or null", raw)
	}
	return r
}

// agPoll waits until cond holds, failing after agWait.
func agPoll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(agWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// agCallParams builds tools/call params.
func agCallParams(name string, args any, progressToken any) map[string]any {
	p := map[string]any{"name": name}
	if args != nil {
		p["arguments"] = args
	}
	if progressToken != nil {
		p["_meta"] = map[string]any{"progressToken": progressToken}
	}
	return p
}

// agEchoTool is a read-only echo of {"text": string}.
func agEchoTool() expertagent.Tool {
	return expertagent.Tool{
		Name:        "echo",
		Description: "Echoes text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Annotations: &expertagent.ToolAnnotations{ReadOnlyHint: new(true)},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*expertagent.CallResult, error) {
			var a struct {
				Text string `json:"text"`
			}
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			return expertagent.Text(a.Text), nil
		},
	}
}

// agBlockingTool blocks until its context ends or release is closed; it
// reports its start on started and the cause of its context's end on ended.
type agBlockingTool struct {
	started chan string // correlation IDs
	ended   chan error
	release chan struct{}
}

func newAgBlockingTool() *agBlockingTool {
	return &agBlockingTool{started: make(chan string, 64), ended: make(chan error, 64), release: make(chan struct{})}
}

func (b *agBlockingTool) tool() expertagent.Tool {
	return expertagent.Tool{
		Name: "block",
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*expertagent.CallResult, error) {
			b.started <- req.CorrelationID
			select {
			case <-ctx.Done():
				b.ended <- context.Cause(ctx)
				return nil, ctx.Err()
			case <-b.release:
				b.ended <- nil
				return expertagent.Text("released"), nil
			}
		},
	}
}

func agRecv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(agWait):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

var errAgTest = errors.New("disk on fire")
