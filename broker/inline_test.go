package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
)

type inlineMsg struct{ topic, payload string }

// chanHandler hands inline messages to a channel without blocking the
// publisher.
func chanHandler(ch chan inlineMsg) broker.MessageHandler {
	return func(topic string, payload []byte) {
		select {
		case ch <- inlineMsg{topic, string(payload)}:
		default:
		}
	}
}

func nextInline(t *testing.T, ch chan inlineMsg) inlineMsg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(waitFor):
		t.Fatal("no inline message within", waitFor)
		return inlineMsg{}
	}
}

// The gateway's path: inline requester subscribed to the context's reply
// filter, paho agent answering through its pool's shared subscription.
func TestInlineBusRoundTrip(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	agent := e.mustConnect(t, "agent1-a", "agent1", pwa, nil)
	startResponder(t, agent, sharedRequests, 1)
	mustPublish(t, agent, presence("agent1", "agent1-a"), 1, true, "online")
	reply := ctxRes("agent1", "agent1-a")

	bus := e.Broker.Bus()
	ctx := testContext(t)

	// Retained presence is delivered before Subscribe returns.
	pres := make(chan inlineMsg, 8)
	if err := bus.Subscribe(ctx, presenceFilter, chanHandler(pres)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-pres:
		if m.topic != presence("agent1", "agent1-a") || m.payload != "online" {
			t.Fatalf("presence = %+v", m)
		}
	default:
		t.Fatal("retained presence not delivered during Subscribe")
	}

	res := make(chan inlineMsg, 8)
	if err := bus.Subscribe(ctx, ctxReplies, chanHandler(res)); err != nil {
		t.Fatal(err)
	}
	if !e.Broker.InlineSubscribed(ctxReplies) {
		t.Fatal("InlineSubscribed = false after Subscribe")
	}
	payload := []byte("ping")
	if err := bus.Publish(ctx, ctxReq, payload); err != nil {
		t.Fatal(err)
	}
	copy(payload, "XXXX") // the bus must not have kept it
	if m := nextInline(t, res); m.topic != reply || m.payload != "re:ping" {
		t.Fatalf("response = %+v", m)
	}

	// Two subscriptions matching one topic both get it, each its own copy.
	const wildFilter = "ff/v2/mcp/agent1/+/plat1/+/+/+/+/res"
	wild := make(chan inlineMsg, 8)
	if err := bus.Subscribe(ctx, wildFilter, chanHandler(wild)); err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(ctx, ctxReq, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if m := nextInline(t, res); m.payload != "re:two" {
		t.Fatalf("reply filter subscription got %+v", m)
	}
	if m := nextInline(t, wild); m.topic != reply || m.payload != "re:two" {
		t.Fatalf("wildcard subscription got %+v", m)
	}

	if err := bus.Unsubscribe(ctx, ctxReplies); err != nil {
		t.Fatal(err)
	}
	if e.Broker.InlineSubscribed(ctxReplies) {
		t.Fatal("InlineSubscribed = true after Unsubscribe")
	}
	if err := bus.Unsubscribe(ctx, ctxReplies); err != nil {
		t.Fatalf("second Unsubscribe: %v", err)
	}
	if err := bus.Publish(ctx, ctxReq, []byte("three")); err != nil {
		t.Fatal(err)
	}
	if m := nextInline(t, wild); m.payload != "re:three" {
		t.Fatalf("wildcard subscription got %+v", m)
	}
	select {
	case m := <-res:
		t.Fatalf("unsubscribed handler got %+v", m)
	default:
	}
	if err := bus.Unsubscribe(ctx, wildFilter); err != nil {
		t.Fatal(err)
	}
}

func TestInlineBusErrors(t *testing.T) {
	e := newEnv(t)
	bus := e.Broker.Bus()
	ctx := testContext(t)
	h := func(string, []byte) {}

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"publish wildcard +", func() error { return bus.Publish(ctx, "a/+/b", nil) }, broker.ErrInvalidTopic},
		{"publish wildcard #", func() error { return bus.Publish(ctx, "a/#", nil) }, broker.ErrInvalidTopic},
		{"publish empty", func() error { return bus.Publish(ctx, "", nil) }, broker.ErrInvalidTopic},
		{"publish $SYS", func() error { return bus.Publish(ctx, "$SYS/x", nil) }, broker.ErrInvalidTopic},
		{"publish $share", func() error { return bus.Publish(ctx, "$share/g/x", nil) }, broker.ErrInvalidTopic},
		{"subscribe shared", func() error { return bus.Subscribe(ctx, sharedRequests, h) }, broker.ErrInvalidFilter},
		{"subscribe bad #", func() error { return bus.Subscribe(ctx, "a/#/b", h) }, broker.ErrInvalidFilter},
		{"subscribe empty", func() error { return bus.Subscribe(ctx, "", h) }, broker.ErrInvalidFilter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
		})
	}
	if err := bus.Subscribe(ctx, "a/b", nil); err == nil {
		t.Error("nil handler accepted")
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := bus.Publish(done, "a/b", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("publish on a cancelled context: %v", err)
	}
}

// Exact request/reply topics are delivered to inline subscribers by the
// inline hook rather than through mochi's topic tree: only what the
// publish checks let through, in order, and nothing after Unsubscribe.
func TestInlineExactContextSubscription(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	agent := e.mustConnect(t, "agent1-a", "agent1", pwa, nil)
	bus := e.Broker.Bus()
	ctx := testContext(t)
	reply := ctxRes("agent1", "agent1-a")

	res := make(chan inlineMsg, 8)
	req := make(chan inlineMsg, 8)
	if err := bus.Subscribe(ctx, reply, chanHandler(res)); err != nil {
		t.Fatal(err)
	}
	if err := bus.Subscribe(ctx, ctxReq, chanHandler(req)); err != nil {
		t.Fatal(err)
	}
	if !e.Broker.InlineSubscribed(reply) || !e.Broker.InlineSubscribed(ctxReq) {
		t.Fatal("InlineSubscribed = false after Subscribe")
	}
	for _, topic := range []string{reply, ctxReq} {
		if e.Broker.InlineTreeMatches(topic) {
			t.Errorf("an inline filter in mochi's tree matches %s", topic)
		}
	}

	mustPublish(t, agent, reply, 0, true, "retained response") // refused by OnPublish
	mustPublish(t, agent, ctxReq, 0, false, "agent request")   // refused by the ACL
	mustPublish(t, agent, reply, 1, false, "r1")
	mustPublish(t, agent, reply, 0, false, "r2")
	for _, want := range []string{"r1", "r2"} {
		if m := nextInline(t, res); m.topic != reply || m.payload != want {
			t.Fatalf("response = %+v, want %q", m, want)
		}
	}

	// The inline client's own publishes reach inline subscribers too.
	if err := bus.Publish(ctx, ctxReq, []byte("own")); err != nil {
		t.Fatal(err)
	}
	if m := nextInline(t, req); m.topic != ctxReq || m.payload != "own" {
		t.Fatalf("request = %+v, want the inline publish", m)
	}

	// Replacing the handler: only the new one gets messages.
	res2 := make(chan inlineMsg, 8)
	if err := bus.Subscribe(ctx, reply, chanHandler(res2)); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, agent, reply, 1, false, "r3")
	if m := nextInline(t, res2); m.payload != "r3" {
		t.Fatalf("new handler got %+v", m)
	}

	if err := bus.Unsubscribe(ctx, reply); err != nil {
		t.Fatal(err)
	}
	if e.Broker.InlineSubscribed(reply) {
		t.Fatal("InlineSubscribed = true after Unsubscribe")
	}
	// The agent's publishes are handled in order, each to the end: once
	// the sentinel on another context's topic is in, "after" has been
	// routed.
	otherReply := replyTopic("agent1", "agent1-a", "plat1/user1/sess2/_/_")
	barrier := make(chan inlineMsg, 1)
	if err := bus.Subscribe(ctx, otherReply, chanHandler(barrier)); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, agent, reply, 1, false, "after")
	mustPublish(t, agent, otherReply, 1, false, "sentinel")
	if m := nextInline(t, barrier); m.payload != "sentinel" {
		t.Fatalf("barrier got %+v", m)
	}
	for _, ch := range []chan inlineMsg{res, res2} {
		select {
		case m := <-ch:
			t.Fatalf("stale or unsubscribed handler got %+v", m)
		default:
		}
	}
}

// TestInlineReplyFilter: a context's reply filter, kept off mochi's tree,
// gets the replies of every agent and instance in its context, from the
// network or the inline client, with their topics; it gets nothing on
// another context's topics, on the context's request topic, on presence
// or on a topic with a level too few, and nothing once unsubscribed. Each
// message that must not arrive is followed by a marker from the same
// publisher, which arrives after it would have.
func TestInlineReplyFilter(t *testing.T) {
	e := newEnv(t)
	pw1 := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pw2 := e.addIdentity(t, "agent2", acl.RoleExpertAgent)
	a1 := e.mustConnect(t, "agent1-a", "agent1", pw1, nil)
	a2 := e.mustConnect(t, "agent2-a", "agent2", pw2, nil)
	bus := e.Broker.Bus()
	ctx := testContext(t)

	replies := make(chan inlineMsg, 16)
	markers := make(chan inlineMsg, 16)
	if err := bus.Subscribe(ctx, ctxReplies, chanHandler(replies)); err != nil {
		t.Fatal(err)
	}
	if err := bus.Subscribe(ctx, otherReplies, chanHandler(markers)); err != nil {
		t.Fatal(err)
	}
	if e.Broker.InlineTreeMatches(ctxRes("agent1", "agent1-a")) || e.Broker.InlineTreeMatches(otherRes("agent1", "agent1-a")) {
		t.Fatal("a reply filter is in mochi's tree")
	}

	type publisher struct {
		name   string
		client paho.Client // nil: the inline bus
		agent  string      // the agent and instance the publisher may reply as
		id     string
	}
	pubs := []publisher{{"agent1", a1, "agent1", "agent1-a"}, {"agent2", a2, "agent2", "agent2-a"}, {"inline", nil, "agent3", "agent3-x"}}
	send := func(t *testing.T, p publisher, topic, payload string) {
		t.Helper()
		if p.client == nil {
			if err := bus.Publish(ctx, topic, []byte(payload)); err != nil {
				t.Fatal(err)
			}
			return
		}
		mustPublish(t, p.client, topic, 1, false, payload)
	}
	// marker publishes a marker on the other context's reply topic and
	// waits for it: whatever p published before it has been routed.
	marker := func(t *testing.T, p publisher) {
		t.Helper()
		payload := "marker from " + p.name
		send(t, p, otherRes(p.agent, p.id), payload)
		if m := nextInline(t, markers); m.topic != otherRes(p.agent, p.id) || m.payload != payload {
			t.Fatalf("marker subscription got %+v, want %q", m, payload)
		}
	}
	noReply := func(t *testing.T) {
		t.Helper()
		select {
		case m := <-replies:
			t.Fatalf("the reply filter got %+v", m)
		default:
		}
	}

	for _, p := range pubs {
		t.Run(p.name, func(t *testing.T) {
			topic := ctxRes(p.agent, p.id)
			send(t, p, topic, "reply of "+p.name)
			if m := nextInline(t, replies); m.topic != topic || m.payload != "reply of "+p.name {
				t.Fatalf("reply filter got %+v, want %s's reply on %s", m, p.name, topic)
			}
			marker(t, p)
			noReply(t)
		})
	}

	inline := pubs[2]
	for _, tc := range []struct {
		name  string
		p     publisher
		topic string
	}{
		{"another context's reply", pubs[0], replyTopic("agent1", "agent1-a", "plat1/user1/sess2/_/_")},
		{"another context's reply, inline", inline, replyTopic("agent3", "agent3-x", "plat2/user1/sess1/_/_")},
		{"the context's request", inline, ctxReq},
		{"the context's request to an instance", inline, requestTopic("agent1", "agent1-a", ctxLevels)},
		{"presence", pubs[0], presence("agent1", "agent1-a")},
		{"a context level short", inline, mcpPrefix + "agent1/agent1-a/plat1/user1/sess1/_/res"},
		{"a level too many", inline, mcpPrefix + "agent1/agent1-a/x/" + ctxLevels + "/res"},
		{"the v1 reply topic", inline, "ff/v1/mcp/" + ctxLevels + "/res"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send(t, tc.p, tc.topic, "not a reply of the context")
			marker(t, tc.p)
			noReply(t)
		})
	}

	t.Run("unsubscribed", func(t *testing.T) {
		if err := bus.Unsubscribe(ctx, ctxReplies); err != nil {
			t.Fatal(err)
		}
		if e.Broker.InlineSubscribed(ctxReplies) {
			t.Fatal("InlineSubscribed = true after Unsubscribe")
		}
		for _, p := range pubs {
			send(t, p, ctxRes(p.agent, p.id), "after unsubscribe")
			marker(t, p)
		}
		noReply(t)
	})
}

// TestInlineResponseAlsoToTreeSubscriber: a reply reaches the gateway's
// inline subscription to the context's reply filter and, as well, a
// platform identity over TCP that subscribed to the same filter (in mochi's
// tree), for as long as it holds the filter (a taken-over session keeps it).
func TestInlineResponseAlsoToTreeSubscriber(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "plat2", acl.RolePlatform)
	agent := e.mustConnect(t, "agent1-a", "agent1", pwa, nil)
	bus := e.Broker.Bus()
	ctx := testContext(t)
	reply, other := ctxRes("agent1", "agent1-a"), otherRes("agent1", "agent1-a")

	res := make(chan inlineMsg, 8)
	if err := bus.Subscribe(ctx, ctxReplies, chanHandler(res)); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, agent, reply, 1, false, "before")
	if m := nextInline(t, res); m.payload != "before" {
		t.Fatalf("inline got %+v, want before", m)
	}

	in := newInbox()
	plat := e.mustConnect(t, "plat2-a", "plat2", pwp, in)
	mustSubscribe(t, plat, ctxReplies)
	for _, qos := range []byte{0, 1} {
		payload := "after-qos" + string('0'+qos)
		mustPublish(t, agent, reply, qos, false, payload)
		in.expectNext(t, reply, payload)
		if m := nextInline(t, res); m.payload != payload {
			t.Fatalf("inline got %+v, want %s", m, payload)
		}
	}

	// A refused subscription (an expert agent may not read responses) puts
	// nothing in the tree.
	if codes := subscribe(t, agent, ctxReplies); len(codes) != 1 || codes[0] < 0x80 {
		t.Fatalf("agent's SUBACK %v, want a refusal", codes)
	}

	// Unsubscribed: the platform gets no more replies on the topic (the
	// sentinel on another of its topics comes next), the bus still does.
	// mochi refuses a SUBSCRIBE or UNSUBSCRIBE whose packet ID is that of
	// a message it sent the client and still waits to see acknowledged (it
	// mixes the two directions' IDs: docs/upstream.md), and paho numbers
	// from 1 as mochi does: the PUBACK must be in first.
	eventually(t, "the delivery acknowledged", func() bool { return e.Broker.Stats().Inflight == 0 })
	mustSubscribe(t, plat, otherReplies)
	if err := wait(t, plat.Unsubscribe(ctxReplies)); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, agent, reply, 1, false, "unsubscribed")
	if m := nextInline(t, res); m.payload != "unsubscribed" {
		t.Fatalf("inline got %+v, want unsubscribed", m)
	}
	mustPublish(t, agent, other, 1, false, "sentinel")
	in.expectNext(t, other, "sentinel")

	// No identity may share a reply filter (acl.Policy), so a shared
	// subscription to one is refused.
	if codes := subscribe(t, plat, "$share/g/"+ctxReplies); len(codes) != 1 || codes[0] < 0x80 {
		t.Fatalf("platform's SUBACK %v for a shared reply filter, want a refusal", codes)
	}

	// A persistent session taken over keeps its filter, now the new
	// connection's: replies reach it until it unsubscribes.
	persistent := func(o *paho.ClientOptions) { o.SetCleanSession(false) }
	old := e.mustConnect(t, "plat2-c", "plat2", pwp, newInbox(), persistent)
	mustSubscribe(t, old, ctxReplies)
	in2 := newInbox()
	taker := e.mustConnect(t, "plat2-c", "plat2", pwp, in2, persistent)
	eventually(t, "the old connection closed by the takeover", func() bool { return !old.IsConnectionOpen() })
	mustPublish(t, agent, reply, 1, false, "taken over")
	in2.expectNext(t, reply, "taken over")
	if m := nextInline(t, res); m.payload != "taken over" {
		t.Fatalf("inline got %+v, want taken over", m)
	}
	eventually(t, "the delivery acknowledged", func() bool { return e.Broker.Stats().Inflight == 0 })
	if err := wait(t, taker.Unsubscribe(ctxReplies)); err != nil {
		t.Fatal(err)
	}
	if e.Broker.TreeMatches("plat2-c", reply) {
		t.Error("the new connection's filter is still in the tree after it unsubscribed")
	}
}
