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

// TestPahoBusDispatch: a context's reply filter gets the replies of every
// agent and instance in that context (and nothing of another context), an
// exact topic's handler takes its messages from a wildcard's, retained
// messages come on subscribe, and Publish reaches an agent.
func TestPahoBusDispatch(t *testing.T) {
	e := rqStartBroker(t)
	bus := e.pahoBus(t, "gw-dispatch")
	agent := e.raw(t, rqRawOpts{clientID: "agent-d"})
	const second = "agent2"
	other := e.raw(t, rqRawOpts{clientID: "agent-o", username: second, password: e.addAgentIdentity(t, second)})
	ctx := rqContext(t)
	presence := contract.PresenceTopic(e.AgentUser, "agent-d")

	replies, wild := make(rqInbox, 16), make(rqInbox, 16)
	if err := bus.Subscribe(ctx, rqCtx(1).ReplyFilter(), replies.handler); err != nil {
		t.Fatal(err)
	}
	// Retained before the subscription. mochi acknowledges a publish
	// before it routes it (docs/upstream.md, mochi 10), so it may arrive
	// twice: live and retained. The sentinel after it marks the end.
	agent.publish(t, presence, true, []byte(`{"status":"online"}`))
	if err := bus.Subscribe(ctx, contract.PresenceFilter, wild.handler); err != nil {
		t.Fatal(err)
	}
	wild.expect(t, presence, `{"status":"online"}`)
	agent.publish(t, presence, false, []byte(`{"status":"sentinel"}`))
	wild.skipUntil(t, presence, `{"status":"sentinel"}`, presence, `{"status":"online"}`)

	res1 := rqCtx(1).ReplyTopic(e.AgentUser, "agent-d")
	agent.publish(t, rqCtx(2).ReplyTopic(e.AgentUser, "agent-d"), false, []byte("not subscribed"))
	agent.publish(t, res1, false, []byte("one"))
	replies.expect(t, res1, "one")
	other.publish(t, rqCtx(1).ReplyTopic(second, "agent-o"), false, []byte("another agent's"))
	replies.expect(t, rqCtx(1).ReplyTopic(second, "agent-o"), "another agent's")

	if err := bus.Unsubscribe(ctx, rqCtx(1).ReplyFilter()); err != nil {
		t.Fatal(err)
	}
	agent.publish(t, res1, false, []byte("after unsubscribe"))
	agent.publish(t, presence, true, []byte(`{"status":"offline"}`))
	wild.expect(t, presence, `{"status":"offline"}`)
	select {
	case m := <-replies:
		t.Fatalf("reply handler got %s %q", m.topic, m.payload)
	default:
	}

	// An exact topic's handler gets its messages, the wildcard's does not:
	// once the barrier (the same publisher's next message) is in, the
	// wildcard handler would have had it.
	exact, barrier := make(rqInbox, 16), make(rqInbox, 16)
	if err := bus.Subscribe(ctx, presence, exact.handler); err != nil {
		t.Fatal(err)
	}
	exact.expect(t, presence, `{"status":"offline"}`) // retained
	if err := bus.Subscribe(ctx, rqCtx(3).ReplyFilter(), barrier.handler); err != nil {
		t.Fatal(err)
	}
	agent.publish(t, presence, false, []byte(`{"status":"online"}`))
	agent.publish(t, rqCtx(3).ReplyTopic(e.AgentUser, "agent-d"), false, []byte("barrier"))
	exact.expect(t, presence, `{"status":"online"}`)
	barrier.expect(t, rqCtx(3).ReplyTopic(e.AgentUser, "agent-d"), "barrier")
	select {
	case m := <-wild:
		t.Fatalf("wildcard handler got %s %q beside the exact one", m.topic, m.payload)
	default:
	}

	// Publish is QoS 1 and reaches an agent.
	agent.serve(t)
	if err := bus.Publish(ctx, rqCtx(1).RequestTopic(e.AgentUser, contract.AnyInstance), []byte("req")); err != nil {
		t.Fatal(err)
	}
	if m := agent.next(t); m.topic != rqCtx(1).RequestTopic(e.AgentUser, contract.AnyInstance) || string(m.payload) != "req" {
		t.Fatalf("agent got %s %q", m.topic, m.payload)
	}
}

// A platform identity may subscribe to the replies of one context at a time
// and to presence only: the broker refuses the rest, and so does
// Subscribe.
func TestPahoBusSubscribeRefused(t *testing.T) {
	e := rqStartBroker(t)
	bus := e.pahoBus(t, "gw-refused")
	in := make(rqInbox, 4)
	for _, filter := range []string{
		contract.TopicPrefix + "#",
		contract.V1Prefix + "#",
		contract.TopicPrefix + "+/+/gw1/+/s1/_/_/" + contract.Reply, // every user's
		contract.TopicPrefix + "+/+/+/+/+/+/+/" + contract.Reply,    // every context's
		contract.RequestFilter(e.AgentUser, contract.AnyInstance),
	} {
		t.Run(filter, func(t *testing.T) {
			if err := bus.Subscribe(rqContext(t), filter, in.handler); err == nil {
				t.Fatalf("subscription to %s accepted", filter)
			}
		})
	}
	ctx, cancel := context.WithCancel(rqContext(t))
	cancel()
	if err := bus.Subscribe(ctx, rqCtx(1).ReplyFilter(), in.handler); !errors.Is(err, context.Canceled) {
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
		"subscribe":   bus.Subscribe(ctx, rqCtx(1).ReplyFilter(), func(string, []byte) {}),
		"unsubscribe": bus.Unsubscribe(ctx, rqCtx(1).ReplyFilter()),
		"publish":     bus.Publish(ctx, rqCtx(1).RequestTopic(e.AgentUser, contract.AnyInstance), nil),
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
		_, err := r.CallTool(rqContext(t), rqCtx(1), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
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
