package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Topics of the MQTT contract (v2) around one context, and the filters
// around them. The agent of most tests is the expert-agent identity
// "agent1"; the broker lets an instance reply and announce itself only
// under its own username and client ID.
const (
	mcpPrefix      = "ff/v2/mcp/"
	ctxLevels      = "plat1/user1/sess1/_/_"
	otherLevels    = "plat1/user2/sess9/_/_"
	ctxReq         = mcpPrefix + "agent1/_/" + ctxLevels + "/req" // a request to agent1's pool
	ctxReplies     = mcpPrefix + "+/+/" + ctxLevels + "/res"      // the context's reply filter
	otherReplies   = mcpPrefix + "+/+/" + otherLevels + "/res"
	requestFilter  = mcpPrefix + "agent1/_/+/+/+/+/+/req" // agent1's pool's requests
	sharedRequests = "$share/agent1/" + requestFilter
	presenceFilter = mcpPrefix + "+/+/status"
)

// presence is the presence topic of the instance clientID of agent.
func presence(agent, clientID string) string { return mcpPrefix + agent + "/" + clientID + "/status" }

// requestTopic is the request topic of the context levels for instance
// ("_": any) of agent.
func requestTopic(agent, instance, levels string) string {
	return mcpPrefix + agent + "/" + instance + "/" + levels + "/req"
}

// replyTopic is the reply topic of the context levels from the instance
// clientID of agent.
func replyTopic(agent, clientID, levels string) string {
	return mcpPrefix + agent + "/" + clientID + "/" + levels + "/res"
}

// ctxRes and otherRes are the reply topics of the instance clientID of
// agent in the test's context and in the other one.
func ctxRes(agent, clientID string) string   { return replyTopic(agent, clientID, ctxLevels) }
func otherRes(agent, clientID string) string { return replyTopic(agent, clientID, otherLevels) }

// requestFilterOf is the filter of agent's pool's requests, and
// sharedRequestsOf its shared form (the group is the agent's username).
func requestFilterOf(agent string) string { return mcpPrefix + agent + "/_/+/+/+/+/+/req" }
func sharedRequestsOf(agent string) string {
	return "$share/" + agent + "/" + requestFilterOf(agent)
}

// replyTo is the reply topic of the request topic req from the instance
// clientID of agent: its agent and instance levels become theirs.
func replyTo(agent, clientID, req string) string {
	rest := strings.TrimPrefix(req, mcpPrefix)
	_, rest, _ = strings.Cut(rest, "/") // agent
	_, rest, _ = strings.Cut(rest, "/") // instance
	return mcpPrefix + agent + "/" + clientID + "/" + strings.TrimSuffix(rest, "req") + "res"
}

// waitFor bounds every single wait of a test.
const waitFor = 10 * time.Second

// testEnv is a running broker (testenv.Env: Store, Policy, Broker, URL)
// whose store starts empty: each test adds the identities it needs.
type testEnv struct {
	*testenv.Env
}

// newEnv starts a broker on 127.0.0.1:0 over a fresh store in t.TempDir(),
// closed by t.Cleanup (before the store, after the clients).
func newEnv(t testing.TB, mods ...func(*broker.Options)) *testEnv {
	t.Helper()
	return &testEnv{testenv.StartBroker(t, testenv.WithoutIdentities(), testenv.WithOptions(mods...))}
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	return testenv.Context(t, 30*time.Second)
}

// addIdentity stores an identity and returns its password.
func (e *testEnv) addIdentity(t testing.TB, username string, role acl.Role) string {
	t.Helper()
	password := "pw-" + username
	if _, err := e.Store.AddIdentity(testContext(t), username, role, []byte(password)); err != nil {
		t.Fatalf("add identity %s: %v", username, err)
	}
	return password
}

// message is what a paho handler saw.
type message struct {
	topic    string
	payload  string
	retained bool
}

// inbox collects the messages of one paho client in arrival order.
type inbox chan message

func newInbox() inbox { return make(inbox, 256) }

func (in inbox) handler(_ paho.Client, m paho.Message) {
	select {
	case in <- message{topic: m.Topic(), payload: string(m.Payload()), retained: m.Retained()}:
	default: // a test that floods its inbox fails on the messages it does get
	}
}

// next returns the next message, failing the test after waitFor.
func (in inbox) next(t testing.TB) message {
	t.Helper()
	select {
	case m := <-in:
		return m
	case <-time.After(waitFor):
		t.Fatal("no message within", waitFor)
		return message{}
	}
}

// expectNext fails unless the next message is on topic with payload: the
// "sentinel" that proves an earlier message, routed to this client before
// it, never arrived (mochi writes to one client in routing order).
func (in inbox) expectNext(t testing.TB, topic, payload string) message {
	t.Helper()
	m := in.next(t)
	if m.topic != topic || m.payload != payload {
		t.Fatalf("next message = %q %q (retained %t), want %q %q", m.topic, m.payload, m.retained, topic, payload)
	}
	return m
}

type clientOption func(*paho.ClientOptions)

func withWill(topic, payload string, retained bool) clientOption {
	return func(o *paho.ClientOptions) { o.SetWill(topic, payload, 1, retained) }
}

func withBroker(url string) clientOption {
	return func(o *paho.ClientOptions) { o.Servers = nil; o.AddBroker(url) }
}

// connect logs a paho (MQTT 3.1.1) client in, without reconnects, and
// returns the CONNECT outcome. Messages no subscription handler takes go to
// in (if not nil). A connected client is disconnected by t.Cleanup.
func (e *testEnv) connect(t testing.TB, clientID, username, password string, in inbox, opts ...clientOption) (paho.Client, error) {
	t.Helper()
	o := paho.NewClientOptions().
		AddBroker(e.URL).
		SetClientID(clientID).
		SetUsername(username).
		SetPassword(password).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(5 * time.Second).
		SetWriteTimeout(5 * time.Second).
		SetKeepAlive(30 * time.Second)
	if in != nil {
		o.SetDefaultPublishHandler(in.handler)
	}
	for _, f := range opts {
		f(o)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(waitFor) {
		c.Disconnect(0)
		return nil, errors.New("connect: timeout")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c, nil
}

func (e *testEnv) mustConnect(t testing.TB, clientID, username, password string, in inbox, opts ...clientOption) paho.Client {
	t.Helper()
	c, err := e.connect(t, clientID, username, password, in, opts...)
	if err != nil {
		t.Fatalf("connect %s as %s: %v", clientID, username, err)
	}
	return c
}

// wait waits for tok and returns its error.
func wait(t testing.TB, tok paho.Token) error {
	t.Helper()
	if !tok.WaitTimeout(waitFor) {
		t.Fatal("token not done within", waitFor)
	}
	return tok.Error()
}

// subscribe subscribes at QoS 1 with the default handler and returns the
// SUBACK code of each filter.
func subscribe(t testing.TB, c paho.Client, filters ...string) []byte {
	t.Helper()
	m := make(map[string]byte, len(filters))
	for _, f := range filters {
		m[f] = 1
	}
	tok := c.SubscribeMultiple(m, nil)
	if err := wait(t, tok); err != nil {
		t.Fatalf("subscribe %q: %v", filters, err)
	}
	res := tok.(*paho.SubscribeToken).Result()
	codes := make([]byte, len(filters))
	for i, f := range filters {
		codes[i] = res[f]
	}
	return codes
}

// mustSubscribe subscribes and fails unless every filter was granted.
func mustSubscribe(t testing.TB, c paho.Client, filters ...string) {
	t.Helper()
	for i, code := range subscribe(t, c, filters...) {
		if code >= 0x80 {
			t.Fatalf("subscribe %q: refused (%#x)", filters[i], code)
		}
	}
}

func publish(t testing.TB, c paho.Client, topic string, qos byte, retained bool, payload string) error {
	t.Helper()
	return wait(t, c.Publish(topic, qos, retained, payload))
}

func mustPublish(t testing.TB, c paho.Client, topic string, qos byte, retained bool, payload string) {
	t.Helper()
	if err := publish(t, c, topic, qos, retained, payload); err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
}

// killable returns a client option whose connection the test can cut
// without a DISCONNECT, as a crash or a network failure would, and the
// function that cuts it.
func killable() (clientOption, func()) {
	open, kill := testenv.KillableConn()
	return func(o *paho.ClientOptions) { o.SetCustomOpenConnectionFn(open) }, kill
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Poll(t, waitFor, what, cond)
}

// responder answers every request on its reply topic (replyTo) with
// "re:"+payload, from a goroutine of its own (never from inside the paho
// handler). It stops when the test ends.
func startResponder(t testing.TB, c paho.Client, filter string, qos byte) {
	t.Helper()
	o := c.OptionsReader()
	agent, clientID := o.Username(), o.ClientID()
	jobs := make(chan message, 1024)
	done := make(chan struct{})
	stopped := make(chan struct{})
	tok := c.Subscribe(filter, qos, func(_ paho.Client, m paho.Message) {
		select {
		case jobs <- message{topic: m.Topic(), payload: string(m.Payload())}:
		case <-done:
		}
	})
	if err := wait(t, tok); err != nil {
		t.Fatalf("responder subscribe: %v", err)
	}
	if code := tok.(*paho.SubscribeToken).Result()[filter]; code >= 0x80 {
		t.Fatalf("responder subscribe %q refused: %#x", filter, code)
	}
	go func() {
		defer close(stopped)
		for {
			select {
			case m := <-jobs:
				c.Publish(replyTo(agent, clientID, m.topic), qos, false, "re:"+m.payload)
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		<-stopped
	})
}

func timeAfter() <-chan time.Time { return time.After(waitFor) }

// expectPresence waits for the next presence payload an inline subscriber
// put in got, and wants it to be want.
func expectPresence(t testing.TB, got <-chan string, want string) {
	t.Helper()
	select {
	case p := <-got:
		if p != want {
			t.Fatalf("presence %q, want %q", p, want)
		}
	case <-timeAfter():
		t.Fatalf("no presence %q", want)
	}
}
