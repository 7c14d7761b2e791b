package expertagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
)

// Helpers of the agent-side tests, all prefixed "ag" so that they cannot
// collide with the gateway side's test helpers in this package.

// agWait bounds every single wait of these tests.
const agWait = 10 * time.Second

// agEnv is a running embedded broker with a real ACL store, and the
// credentials of one expert agent and one platform identity.
type agEnv struct {
	*testenv.Env
}

func agContext(t testing.TB) context.Context {
	t.Helper()
	return testenv.Context(t, 30*time.Second)
}

// agStartBroker starts the broker on 127.0.0.1:0 over a fresh store, both
// closed by t.Cleanup after everything registered later. The inline bus
// publishes at QoS 1; Restart (closes the broker and starts a fresh one on
// the same address) makes every client reconnect.
func agStartBroker(t testing.TB) *agEnv {
	t.Helper()
	return &agEnv{testenv.StartBroker(t, testenv.WithReadyCheck(), testenv.WithOptions(func(o *broker.Options) { o.InlineQoS = 1 }))}
}

// agentOptions fills in the broker and the agent identity: every agent of
// these tests logs in as e.AgentUser, the one name the broker lets it
// subscribe to requests for, so that agents of one test are one pool.
func (e *agEnv) agentOptions(t testing.TB, o expertagent.AgentOptions) expertagent.AgentOptions {
	t.Helper()
	if o.BrokerURL == "" {
		o.BrokerURL = e.URL
	}
	if o.Username == "" {
		o.Username, o.Password = e.AgentUser, e.AgentPassword
	}
	if o.Logger == nil {
		o.Logger = testenv.Logger(t, "agent")
	}
	if o.ClaimAfter == 0 {
		// These tests read every message the agent sends: claims of slow
		// calls would come in between (requester_claim_test.go tests them).
		o.ClaimAfter = -1
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
	r := agRunNoWait(t, a)
	select {
	case <-a.Ready():
	case err := <-r.done:
		t.Fatalf("Run returned before Ready: %v", err)
	case <-time.After(agWait):
		t.Fatal("agent not Ready in time")
	}
	return r
}

// agRunNoWait starts a.Run without waiting for Ready; t.Cleanup stops it
// and checks that Run returned nil.
func agRunNoWait(t testing.TB, a *expertagent.Agent) *agRunning {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &agRunning{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		if err := r.stop(t); err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
	})
	return r
}

// agReply is one message an agent published on a reply topic.
type agReply struct {
	topic string // which instance sent it: ReplyTopic(username, clientID)
	env   contract.Envelope
	msg   jsonrpc.Message
	raw   string
}

// agCaller plays the gateway over the broker's InlineBus: it publishes
// envelopes on one context's request topics for the agent e.AgentUser and
// collects what arrives on the context's reply filter, in order.
type agCaller struct {
	env     *agEnv
	ctx     contract.Context
	replies chan agReply
	bad     atomic.Int32 // undecodable replies
	seq     atomic.Int64
}

var agContextSeq atomic.Int64

// newCaller subscribes to a fresh context's replies, from every agent
// instance.
func (e *agEnv) newCaller(t testing.TB) *agCaller {
	t.Helper()
	c := &agCaller{env: e, replies: make(chan agReply, 1024), ctx: contract.Context{
		PlatformID: "plat", UserID: "user1",
		SessionID: fmt.Sprintf("sess%d", agContextSeq.Add(1)), EntityType: contract.NoEntity, EntityID: contract.NoEntity,
	}}
	bus := e.Broker.Bus()
	topic := c.ctx.ReplyFilter()
	if err := bus.Subscribe(agContext(t), topic, func(replyTopic string, payload []byte) {
		r := agReply{topic: replyTopic, raw: string(payload)}
		env, err := contract.DecodeEnvelope(payload)
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

// agSendOpts are the envelope fields a test may set, and the instance a
// request is addressed to.
type agSendOpts struct {
	deadline time.Time
	caller   *contract.Caller
	noID     bool   // send a notification
	to       string // the instance level: a client ID; "" = contract.AnyInstance
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
	env := contract.Envelope{CorrelationID: corrID, Message: raw, Caller: o.caller}
	if o.caller == nil {
		env.Caller = &contract.Caller{UserID: c.ctx.UserID, Scopes: []string{"tools:list", "tools:call"}}
	}
	if !o.deadline.IsZero() {
		env.Deadline = o.deadline.UnixMilli()
	}
	payload, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	to := o.to
	if to == "" {
		to = contract.AnyInstance
	}
	c.publishRaw(t, c.requestTopic(to), payload)
}

// requestTopic is the context's request topic for instance (a client ID or
// contract.AnyInstance) of the agent the tests log in as.
func (c *agCaller) requestTopic(instance string) string {
	return c.ctx.RequestTopic(c.env.AgentUser, instance)
}

// replyTopic is where the instance clientID answers in this context.
func (c *agCaller) replyTopic(clientID string) string {
	return c.ctx.ReplyTopic(c.env.AgentUser, clientID)
}

func (c *agCaller) publishRaw(t testing.TB, topic string, payload []byte) {
	t.Helper()
	if err := c.env.Broker.Bus().Publish(agContext(t), topic, payload); err != nil {
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
// one subscriber: the broker keeps the order). With several instances it
// proves it for the one that answers the ping only: addressing the ping to
// each of them (expectNoReplyFrom) covers them all.
func (c *agCaller) expectNoReply(t testing.TB) {
	t.Helper()
	c.call(t, "ping", nil)
}

// expectNoReplyFrom is expectNoReply for each instance named, by a ping
// addressed to it.
func (c *agCaller) expectNoReplyFrom(t testing.TB, clientIDs ...string) {
	t.Helper()
	for _, id := range clientIDs {
		r := c.response(t, c.send(t, "ping", nil, agSendOpts{to: id}))
		if r.topic != c.replyTopic(id) {
			t.Fatalf("ping to %s answered on %s, want %s", id, r.topic, c.replyTopic(id))
		}
	}
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
	testenv.Poll(t, agWait, what, cond)
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
		Tool: mcp.Tool{
			Name:        "echo",
			Description: "Echoes text.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: new(true)},
		},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			var a struct {
				Text string `json:"text"`
			}
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			return mcp.TextResult(a.Text), nil
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
		Tool: mcp.Tool{
			Name: "block",
		},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			b.started <- req.CorrelationID
			select {
			case <-ctx.Done():
				b.ended <- context.Cause(ctx)
				return nil, ctx.Err()
			case <-b.release:
				b.ended <- nil
				return mcp.TextResult("released"), nil
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
