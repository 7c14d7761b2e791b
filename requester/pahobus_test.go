package requester_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/requester"
)

// rqInbox collects what a Bus handler receives.
type rqInbox chan rqMsg

func (in rqInbox) handler(topic string, payload []byte) {
	select {
	case in <- rqMsg{topic: topic, payload: payload}:
	default:
	}
}

// expect fails unless the next message is topic/payload. Messages from one
// publisher arrive in order, so a sentinel published after a message that
// must not arrive proves it did not.
func (in rqInbox) expect(t testing.TB, topic, payload string) {
	t.Helper()
	select {
	case m := <-in:
		if m.topic != topic || string(m.payload) != payload {
			t.Fatalf("got %s %q, want %s %q", m.topic, m.payload, topic, payload)
		}
	case <-time.After(rqWait):
		t.Fatalf("no message; want %s %q", topic, payload)
	}
}

// skipUntil waits for topic/payload, letting through only copies of
// skipTopic/skipPayload before it.
func (in rqInbox) skipUntil(t testing.TB, topic, payload, skipTopic, skipPayload string) {
	t.Helper()
	for {
		select {
		case m := <-in:
			if m.topic == topic && string(m.payload) == payload {
				return
			}
			if m.topic != skipTopic || string(m.payload) != skipPayload {
				t.Fatalf("got %s %q, want %s %q", m.topic, m.payload, topic, payload)
			}
		case <-time.After(rqWait):
			t.Fatalf("no message; want %s %q", topic, payload)
		}
	}
}

func TestPahoBusDispatch(t *testing.T) {
	e := rqStartBroker(t)
	bus := e.pahoBus(t, "gw-dispatch")
	agent := e.raw(t, rqRawOpts{clientID: "agent-d"})
	ctx := rqContext(t)

	exact, wild := make(rqInbox, 16), make(rqInbox, 16)
	res1, res2 := rqCtx(1).ResponseTopic(), rqCtx(2).ResponseTopic()
	if err := bus.Subscribe(ctx, res1, exact.handler); err != nil {
		t.Fatal(err)
	}
	// Retained before the subscription. mochi acknowledges a publish
	// before it routes it (docs/upstream.md, mochi 10), so it may arrive
	// twice: live and retained. The sentinel after it marks the end.
	agent.publish(t, contract.PresenceTopic("agent-d"), true, []byte(`{"status":"online"}`))
	if err := bus.Subscribe(ctx, contract.PresenceFilter, wild.handler); err != nil {
		t.Fatal(err)
	}
	wild.expect(t, contract.PresenceTopic("agent-d"), `{"status":"online"}`)
	agent.publish(t, contract.PresenceTopic("agent-d"), false, []byte(`{"status":"sentinel"}`))
	wild.skipUntil(t, contract.PresenceTopic("agent-d"), `{"status":"sentinel"}`, contract.PresenceTopic("agent-d"), `{"status":"online"}`)
	agent.publish(t, res2, false, []byte("not subscribed"))
	agent.publish(t, res1, false, []byte("one"))
	exact.expect(t, res1, "one")

	if err := bus.Unsubscribe(ctx, res1); err != nil {
		t.Fatal(err)
	}
	agent.publish(t, res1, false, []byte("after unsubscribe"))
	agent.publish(t, contract.PresenceTopic("agent-d"), true, []byte(`{"status":"offline"}`))
	wild.expect(t, contract.PresenceTopic("agent-d"), `{"status":"offline"}`)
	select {
	case m := <-exact:
		t.Fatalf("exact handler got %s %q", m.topic, m.payload)
	default:
	}

	// Publish is QoS 1 and reaches an agent.
	agent.subscribe(t, contract.RequestFilter)
	if err := bus.Publish(ctx, rqCtx(1).RequestTopic(), []byte("req")); err != nil {
		t.Fatal(err)
	}
	if m := agent.next(t); m.topic != rqCtx(1).RequestTopic() || string(m.payload) != "req" {
		t.Fatalf("agent got %s %q", m.topic, m.payload)
	}
}

func TestPahoBusSubscribeRefused(t *testing.T) {
	e := rqStartBroker(t)
	bus := e.pahoBus(t, "gw-refused")
	in := make(rqInbox, 4)
	// A platform identity may subscribe to exact response topics only.
	if err := bus.Subscribe(rqContext(t), "ff/v1/mcp/#", in.handler); err == nil {
		t.Fatal("subscription to ff/v1/mcp/# accepted")
	}
	ctx, cancel := context.WithCancel(rqContext(t))
	cancel()
	if err := bus.Subscribe(ctx, rqCtx(1).ResponseTopic(), in.handler); !errors.Is(err, context.Canceled) {
		t.Fatalf("subscribe with a cancelled ctx: %v", err)
	}
}

func TestPahoBusClose(t *testing.T) {
	e := rqStartBroker(t)
	bus := e.pahoBus(t, "gw-close")
	if err := bus.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bus.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := rqContext(t)
	for name, err := range map[string]error{
		"subscribe":   bus.Subscribe(ctx, rqCtx(1).ResponseTopic(), func(string, []byte) {}),
		"unsubscribe": bus.Unsubscribe(ctx, rqCtx(1).ResponseTopic()),
		"publish":     bus.Publish(ctx, rqCtx(1).RequestTopic(), nil),
	} {
		if !errors.Is(err, requester.ErrBusClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if _, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{BrokerURL: e.URL, Username: e.PlatformUser, Password: "wrong", ConnectTimeout: 5 * time.Second}); err == nil {
		t.Error("dial with a wrong password succeeded")
	}
}

// paho does not subscribe again after a reconnect. The broker restarts
// (new process, no sessions); the Requester's cached context must still get
// its replies afterwards, without the Requester subscribing again.
func TestPahoBusResubscribesAfterReconnect(t *testing.T) {
	e := rqStartBroker(t)
	e.startAgent(t, "echoer", rqEchoTool())
	bus := e.pahoBus(t, "gw-reconnect")
	r := rqRequester(t, bus, requester.Options{IgnorePresence: true, CallTimeout: time.Second})
	call := func() error {
		_, err := r.CallTool(rqContext(t), rqCtx(1), nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}

	addr := e.Broker.Addr().String()
	if err := e.Broker.Close(); err != nil {
		t.Fatal(err)
	}
	rqPoll(t, "bus notices the broker is gone", func() bool { return !bus.IsConnected() })
	b2, err := broker.New(broker.Options{Addr: addr, Authenticator: e.Store, Authorizer: acl.NewPolicy(nil), Logger: rqLogger(t, "broker2")})
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.Start(rqContext(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b2.Close() })

	deadline := time.Now().Add(3 * rqWait)
	for {
		err := call()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer after the broker came back: %v", err)
		}
		if !errors.Is(err, requester.ErrTimeout) {
			time.Sleep(20 * time.Millisecond) // not connected yet: publish failed at once
		}
	}
	if s := r.Stats(); s.Subscribes != 1 || s.Contexts != 1 {
		t.Fatalf("the requester subscribed again itself: %+v", s)
	}
	// Close while the second broker is still up (cleanups run after it
	// has gone).
	if err := r.Close(rqContext(t)); err != nil {
		t.Fatal(err)
	}
}
