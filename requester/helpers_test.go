package requester_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/requester"
)

// Helpers of the gateway-side tests (prefix rq: the agent-side tests share
// this package).

// The embedded broker's inline client is a Bus (structurally: broker does
// not import expertagent).
var _ requester.Bus = (*broker.InlineBus)(nil)

// rqWait bounds every single wait of a test.
const rqWait = 10 * time.Second

// rqEnv is a running embedded broker (testenv.Env) with one platform
// identity (PahoBus logins) and one expert-agent identity, e.AgentUser
// (Agent SDK and raw responders): the agent name most tests call.
type rqEnv struct {
	*testenv.Env
}

// rqStartBroker starts the real embedded broker on 127.0.0.1:0 over a real
// acl store in t.TempDir(), with one platform and one expert-agent identity.
func rqStartBroker(t testing.TB, mods ...func(*broker.Options)) *rqEnv {
	t.Helper()
	return &rqEnv{testenv.StartBroker(t, testenv.WithLogLevel(logrus.InfoLevel), testenv.WithOptions(mods...))}
}

func rqContext(t testing.TB) context.Context {
	t.Helper()
	return testenv.Context(t, 60*time.Second)
}

// rqLogger logs to t.Log (seen with -v or on failure) while the test runs.
func rqLogger(t testing.TB, component string) *logrus.Entry {
	t.Helper()
	return testenv.LoggerAt(t, component, logrus.InfoLevel)
}

// addAgentIdentity adds another expert-agent identity, username (its
// agent name on the bus), and returns its password.
func (e *rqEnv) addAgentIdentity(t testing.TB, username string) string {
	t.Helper()
	password := "pw-" + username
	if _, err := e.Store.AddIdentity(rqContext(t), username, acl.RoleExpertAgent, []byte(password)); err != nil {
		t.Fatalf("add identity %s: %v", username, err)
	}
	return password
}

// rqCtx is the i-th test context of the gateway "gw1".
func rqCtx(i int) contract.Context {
	return contract.Context{PlatformID: "gw1", UserID: fmt.Sprintf("u%d", i), SessionID: fmt.Sprintf("s%d", i), EntityType: contract.NoEntity, EntityID: contract.NoEntity}
}

// busKind names the two Bus implementations the Requester runs over.
type busKind string

const (
	busInline busKind = "inline"
	busPaho   busKind = "paho"
)

// bus returns the inline bus, or a PahoBus logged in as the platform
// identity over TCP (closed at cleanup).
func (e *rqEnv) bus(t testing.TB, kind busKind) requester.Bus {
	t.Helper()
	if kind == busInline {
		return e.Broker.Bus()
	}
	return e.pahoBus(t, "")
}

func (e *rqEnv) pahoBus(t testing.TB, clientID string) *requester.PahoBus {
	t.Helper()
	b, err := requester.DialPahoBus(rqContext(t), requester.PahoBusOptions{
		BrokerURL:            e.URL,
		Username:             e.PlatformUser,
		Password:             e.PlatformPassword,
		ClientID:             clientID,
		ConnectTimeout:       5 * time.Second,
		MaxReconnectInterval: 200 * time.Millisecond,
		Logger:               rqLogger(t, "pahobus"),
	})
	if err != nil {
		t.Fatalf("dial paho bus: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// requester starts a Requester over bus, closed at cleanup.
func rqRequester(t testing.TB, bus requester.Bus, opts requester.Options) *requester.Requester {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = rqLogger(t, "requester")
	}
	r := requester.New(bus, opts)
	if err := r.Start(rqContext(t)); err != nil {
		t.Fatalf("start requester: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), rqWait)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("close requester: %v", err)
		}
	})
	return r
}

// rqRunning is an Agent running in the background.
type rqRunning struct {
	agent  *expertagent.Agent
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop stops the agent cleanly and returns what Run returned.
func (a *rqRunning) stop(t testing.TB) error {
	t.Helper()
	a.once.Do(func() {
		a.cancel()
		select {
		case a.err = <-a.done:
		case <-time.After(3 * rqWait):
			a.err = errors.New("agent did not stop")
		}
	})
	return a.err
}

// startAgent runs an Agent SDK agent with tools, logged in as the
// expert-agent identity (so its name on the bus is e.AgentUser), and waits
// until it serves. name is the name it reports in presence.
func (e *rqEnv) startAgent(t testing.TB, name string, tools ...expertagent.Tool) *rqRunning {
	t.Helper()
	return e.startAgentAs(t, e.AgentUser, e.AgentPassword, name, tools...)
}

// startAgentAs is startAgent logged in as username (the agent's name on the
// bus) with password.
func (e *rqEnv) startAgentAs(t testing.TB, username, password, name string, tools ...expertagent.Tool) *rqRunning {
	t.Helper()
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL:       e.URL,
		Username:        username,
		Password:        password,
		Name:            name,
		Version:         "test",
		Concurrency:     512, // tests send hundreds of calls at once
		ConnectTimeout:  5 * time.Second,
		ShutdownTimeout: 2 * time.Second,
		Logger:          rqLogger(t, "agent"),
	})
	for _, tool := range tools {
		if err := a.AddTool(tool); err != nil {
			t.Fatalf("add tool %s: %v", tool.Name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &rqRunning{agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		if err := run.stop(t); err != nil {
			t.Errorf("agent run: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-run.done:
		run.once.Do(func() { run.err = err })
		t.Fatalf("agent stopped before ready: %v", err)
	case <-time.After(rqWait):
		t.Fatal("agent not ready in time")
	}
	return run
}

// rqEchoTool answers {"text": s} with a text content s.
func rqEchoTool() expertagent.Tool {
	return expertagent.Tool{
		Tool: mcp.Tool{
			Name:        "echo",
			Description: "Returns the text it is given.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			var in struct {
				Text string `json:"text"`
			}
			if err := req.Bind(&in); err != nil {
				return nil, err
			}
			return mcp.TextResult(in.Text), nil
		},
	}
}

// rqText extracts the text of a tools/call result's first content.
func rqText(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	if len(res.Content) == 0 {
		t.Fatalf("result %s: no content", raw)
	}
	if res.IsError {
		t.Fatalf("result %s: isError", raw)
	}
	return res.Content[0].Text
}

// rqPoll polls cond until it holds or rqWait passes.
func rqPoll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Poll(t, rqWait, what, cond)
}

// rqMsg is a message a raw client received.
type rqMsg struct {
	topic   string
	payload []byte
}

// rqRaw is a raw paho client logged in as an expert-agent identity
// (e.AgentUser by default), with every message it receives in inbox. Tests
// use it as a hand-made agent instance that misbehaves on purpose: its
// agent name is its username, its instance its client ID. It never
// publishes from its paho handler.
type rqRaw struct {
	c        paho.Client
	agent    string // the username it logged in with
	clientID string
	inbox    chan rqMsg
	kill     func() // cuts the TCP connection without a DISCONNECT
}

type rqRawOpts struct {
	clientID string
	// username and password log in; "" = e.AgentUser.
	username, password string
	will               *contract.Presence // Last Will on its presence topic (retained)
}

func (e *rqEnv) raw(t testing.TB, o rqRawOpts) *rqRaw {
	t.Helper()
	if o.clientID == "" {
		o.clientID = "raw-" + strings.ReplaceAll(t.Name(), "/", "-")
	}
	if o.username == "" {
		o.username, o.password = e.AgentUser, e.AgentPassword
	}
	r := &rqRaw{agent: o.username, clientID: o.clientID, inbox: make(chan rqMsg, 4096)}
	open, kill := testenv.KillableConn()
	r.kill = kill
	po := paho.NewClientOptions().
		AddBroker(e.URL).
		SetClientID(o.clientID).
		SetUsername(o.username).
		SetPassword(o.password).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectTimeout(5 * time.Second).
		SetWriteTimeout(5 * time.Second).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			select {
			case r.inbox <- rqMsg{topic: m.Topic(), payload: m.Payload()}:
			default:
			}
		}).
		SetCustomOpenConnectionFn(open)
	if o.will != nil {
		w, _ := json.Marshal(o.will)
		po.SetBinaryWill(contract.PresenceTopic(o.username, o.clientID), w, 1, true)
	}
	r.c = paho.NewClient(po)
	if tok := r.c.Connect(); !tok.WaitTimeout(rqWait) || tok.Error() != nil {
		t.Fatalf("raw connect %s: %v", o.clientID, tok.Error())
	}
	t.Cleanup(func() { r.c.Disconnect(50) })
	return r
}

func (r *rqRaw) subscribe(t testing.TB, filter string) {
	t.Helper()
	tok := r.c.Subscribe(filter, 1, nil)
	if !tok.WaitTimeout(rqWait) || tok.Error() != nil {
		t.Fatalf("raw subscribe %s: %v", filter, tok.Error())
	}
	if code := tok.(*paho.SubscribeToken).Result()[filter]; code >= 0x80 {
		t.Fatalf("raw subscribe %s refused: %#x", filter, code)
	}
}

// serve subscribes to the requests for its agent's pool (plainly: every
// raw instance of the agent gets them all) and to those for its own
// instance, which is where a call's messages go once the instance has
// claimed it.
func (r *rqRaw) serve(t testing.TB) {
	t.Helper()
	r.subscribe(t, contract.RequestFilter(r.agent, contract.AnyInstance))
	r.subscribe(t, contract.RequestFilter(r.agent, r.clientID))
}

func (r *rqRaw) publish(t testing.TB, topic string, retained bool, payload []byte) {
	t.Helper()
	tok := r.c.Publish(topic, 1, retained, payload)
	if !tok.WaitTimeout(rqWait) || tok.Error() != nil {
		t.Fatalf("raw publish %s: %v", topic, tok.Error())
	}
}

// announce publishes its retained presence.
func (r *rqRaw) announce(t testing.TB, status string) {
	t.Helper()
	p, _ := json.Marshal(contract.Presence{Status: status, ClientID: r.clientID, Name: "raw", Version: "0"})
	r.publish(t, contract.PresenceTopic(r.agent, r.clientID), true, p)
}

// next returns the next message received.
func (r *rqRaw) next(t testing.TB) rqMsg {
	t.Helper()
	select {
	case m := <-r.inbox:
		return m
	case <-time.After(rqWait):
		t.Fatal("raw client: no message in time")
		return rqMsg{}
	}
}

// rqRequest is a request the raw client received, decoded.
type rqRequest struct {
	topic string
	env   contract.Envelope
	msg   struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
}

func (r *rqRaw) nextRequest(t testing.TB) rqRequest {
	t.Helper()
	m := r.next(t)
	var q rqRequest
	q.topic = m.topic
	env, err := contract.DecodeEnvelope(m.payload)
	if err != nil {
		t.Fatalf("request on %s: %v", m.topic, err)
	}
	q.env = env
	if err := json.Unmarshal(env.Message, &q.msg); err != nil {
		t.Fatalf("request message: %v", err)
	}
	return q
}

// replyTopic is its reply topic in the context of the request topic
// reqTopic.
func (r *rqRaw) replyTopic(t testing.TB, reqTopic string) string {
	t.Helper()
	q, err := contract.ParseTopic(reqTopic)
	if err != nil || q.Kind != contract.Request {
		t.Fatalf("request topic %s: %v", reqTopic, err)
	}
	return q.Context.ReplyTopic(r.agent, r.clientID)
}

// reply publishes an envelope with message on its reply topic in the
// context of the request topic reqTopic.
func (r *rqRaw) reply(t testing.TB, reqTopic, corrID string, message string) {
	t.Helper()
	r.publish(t, r.replyTopic(t, reqTopic), false, rqEnvelope(t, corrID, message))
}

// rqEnvelope encodes an envelope of corrID around message.
func rqEnvelope(t testing.TB, corrID, message string) []byte {
	t.Helper()
	env := contract.Envelope{CorrelationID: corrID, Message: json.RawMessage(message)}
	p, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rqResult is a JSON-RPC success response to id with result.
func rqResult(id string, result string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":%s}`, id, result)
}

// rqGo runs f on a goroutine and returns the channel of its error, so
// that t.Fatal stays on the test goroutine.
func rqGo(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// rqRecv receives from ch, failing the test after rqWait.
func rqRecv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(rqWait):
		t.Fatal("nothing received in time")
		var zero T
		return zero
	}
}
