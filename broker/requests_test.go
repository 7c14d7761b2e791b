package broker_test

import (
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
)

// otherReq is agent1's pool's request topic of another context than ctxReq.
const otherReq = mcpPrefix + "agent1/_/" + otherLevels + "/req"

// narrowRequests is agent1's pool's requests of the platform plat1 only.
const narrowRequests = mcpPrefix + "agent1/_/plat1/+/+/+/+/req"

// alsoAllow is an Authorizer that also grants the subscription to filter.
type alsoAllow struct {
	broker.Authorizer
	filter string
}

func (a alsoAllow) Allow(id acl.Identity, clientID string, action acl.Action, topic string) bool {
	return action == acl.Subscribe && topic == a.filter || a.Authorizer.Allow(id, clientID, action, topic)
}

// agentEnv starts a broker with the expert-agent identity agent1 and
// returns it with agent1's password.
func agentEnv(t *testing.T, mods ...func(*broker.Options)) (*testEnv, string) {
	t.Helper()
	e := newEnv(t, mods...)
	return e, e.addIdentity(t, "agent1", acl.RoleExpertAgent)
}

// agentOn connects clientID as agent1, subscribes it to filter and returns
// its inbox.
func agentOn(t *testing.T, e *testEnv, pw, clientID, filter string) inbox {
	t.Helper()
	in := newInbox()
	mustSubscribe(t, e.mustConnect(t, clientID, "agent1", pw, in), filter)
	return in
}

// counts publishes n requests from the InlineBus and counts, per inbox,
// the payloads that arrived; every payload must arrive exactly `copies`
// times in all.
func counts(t *testing.T, e *testEnv, n, copies int, inboxes ...inbox) []int {
	t.Helper()
	ctx := testContext(t)
	for i := range n {
		if err := e.Broker.Bus().Publish(ctx, ctxReq, fmt.Appendf(nil, "r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]int, len(inboxes))
	seen := map[string]int{}
	deadline := timeAfter()
	for total := 0; total < n*copies; {
		select {
		case <-deadline:
			t.Fatalf("%d of %d requests arrived: %v", total, n*copies, seen)
		default:
		}
		for i, in := range inboxes {
			select {
			case m := <-in:
				if m.topic != ctxReq {
					t.Fatalf("request on %q", m.topic)
				}
				seen[m.payload]++
				got[i]++
				total++
			default:
			}
		}
	}
	for p, c := range seen {
		if c != copies {
			t.Errorf("request %s arrived %d times, want %d", p, c, copies)
		}
	}
	return got
}

// The gateway's requests reach the expert agents as the MQTT contract
// says: once per agent group, to every plain subscriber.
func TestRequestDelivery(t *testing.T) {
	t.Run("one agent", func(t *testing.T) {
		e, pw := agentEnv(t)
		in := agentOn(t, e, pw, "agent1-a", sharedRequests)
		before := e.Broker.Stats().MessagesSent
		counts(t, e, 50, 1, in)
		if sent := e.Broker.Stats().MessagesSent - before; sent != 50 {
			t.Errorf("MessagesSent grew by %d, want 50", sent)
		}
	})

	t.Run("one agent on a plain subscription", func(t *testing.T) {
		e, pw := agentEnv(t)
		in := agentOn(t, e, pw, "agent1-a", requestFilter)
		counts(t, e, 20, 1, in)
	})

	t.Run("a group of two serves each request once", func(t *testing.T) {
		e, pw := agentEnv(t)
		in1, in2 := agentOn(t, e, pw, "agent1-a", sharedRequests), agentOn(t, e, pw, "agent1-b", sharedRequests)
		// Members take turns (shareHook).
		if got := counts(t, e, 40, 1, in1, in2); got[0] != 20 || got[1] != 20 {
			t.Errorf("split %v, want 20 each", got)
		}
	})

	t.Run("two groups: each gets every request", func(t *testing.T) {
		// The ACL lets an agent share only under its own username: a
		// second group takes an Authorizer that allows it.
		e, pw := agentEnv(t, func(o *broker.Options) { o.Authorizer = alsoAllow{o.Authorizer, "$share/others/" + requestFilter} })
		in1, in2 := agentOn(t, e, pw, "agent1-a", sharedRequests), agentOn(t, e, pw, "agent1-b", "$share/others/"+requestFilter)
		if got := counts(t, e, 20, 2, in1, in2); got[0] != 20 || got[1] != 20 {
			t.Errorf("got %v, want 20 each", got)
		}
	})

	t.Run("an inline filter naming a context level gets them too", func(t *testing.T) {
		e, pw := agentEnv(t)
		in := agentOn(t, e, pw, "agent1-a", sharedRequests)
		narrow := make(chan inlineMsg, 64)
		ctx := testContext(t)
		if err := e.Broker.Bus().Subscribe(ctx, narrowRequests, chanHandler(narrow)); err != nil {
			t.Fatal(err)
		}
		counts(t, e, 10, 1, in)
		for range 10 {
			if m := nextInline(t, narrow); m.topic != ctxReq {
				t.Fatalf("inline subscriber got %+v", m)
			}
		}
		if err := e.Broker.Bus().Unsubscribe(ctx, narrowRequests); err != nil {
			t.Fatal(err)
		}
		counts(t, e, 5, 1, in)
		// Inline handlers run before Publish returns: none is on its way.
		select {
		case m := <-narrow:
			t.Fatalf("the unsubscribed inline handler got %+v", m)
		default:
		}
	})

	t.Run("a new connection of the agent gets them", func(t *testing.T) {
		e, pw := agentEnv(t)
		in1 := newInbox()
		a := e.mustConnect(t, "agent1-a", "agent1", pw, in1)
		mustSubscribe(t, a, sharedRequests)
		counts(t, e, 5, 1, in1)
		a.Disconnect(100)
		eventually(t, "the old connection gone", func() bool { return e.Broker.ClientCount() == 0 })
		in2 := agentOn(t, e, pw, "agent1-a", sharedRequests)
		counts(t, e, 5, 1, in2)
	})

	t.Run("MQTT 5 agent", func(t *testing.T) {
		e, pw := agentEnv(t)
		c := dialRaw(t, e.Broker.Addr().String())
		if ack := c.connect("agent1-v5", "agent1", pw, 30); ack.ReasonCode != 0 {
			t.Fatalf("CONNACK reason %#x", ack.ReasonCode)
		}
		c.send(packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
			PacketID:    1,
			Filters:     packets.Subscriptions{{Filter: sharedRequests, Qos: 1}},
		})
		c.mustRecv(packets.Suback)
		for _, p := range []string{"", "small", string(make([]byte, 300))} { // 300: a two-byte remaining length
			if err := e.Broker.Bus().Publish(testContext(t), ctxReq, []byte(p)); err != nil {
				t.Fatal(err)
			}
			pk := c.mustRecv(packets.Publish)
			if pk.TopicName != ctxReq || string(pk.Payload) != p || pk.FixedHeader.Qos != 0 || pk.FixedHeader.Retain {
				t.Errorf("PUBLISH topic %q payload %d bytes qos %d retain %t", pk.TopicName, len(pk.Payload), pk.FixedHeader.Qos, pk.FixedHeader.Retain)
			}
		}
	})

	t.Run("inline QoS 1", func(t *testing.T) {
		e, pw := agentEnv(t, func(o *broker.Options) { o.InlineQoS = 1 })
		in := agentOn(t, e, pw, "agent1-a", sharedRequests)
		counts(t, e, 5, 1, in)
	})
}

// A filter the ACL refuses gives the agent nothing more; a second agent's
// filter naming a context level gets the requests it matches as well.
func TestRequestDeliveryNetworkFilters(t *testing.T) {
	e, pw := agentEnv(t)
	in := newInbox()
	a := e.mustConnect(t, "agent1-a", "agent1", pw, in)
	mustSubscribe(t, a, sharedRequests)
	for _, f := range []string{"ff/v2/mcp/agent1/_/plat1/#", "ff/v2/mcp/agent1/#", "ff/v1/mcp/plat1/#"} {
		if codes := subscribe(t, a, f); len(codes) != 1 || codes[0] < 0x80 {
			t.Fatalf("%s granted to an agent: %#x", f, codes)
		}
	}
	counts(t, e, 5, 1, in)

	narrowIn := newInbox()
	b := e.mustConnect(t, "agent1-b", "agent1", pw, narrowIn)
	mustSubscribe(t, b, narrowRequests)
	if got := counts(t, e, 5, 2, in, narrowIn); got[0] != 5 || got[1] != 5 {
		t.Errorf("got %v, want 5 each", got)
	}
}

// readDenied is an Authorizer that refuses the delivery of one topic (a
// read of that topic name) while it grants the filters that match it.
type readDenied struct {
	broker.Authorizer
	topic string
}

func (a readDenied) Allow(id acl.Identity, clientID string, action acl.Action, topic string) bool {
	if action == acl.Subscribe && topic == a.topic {
		return false
	}
	return a.Authorizer.Allow(id, clientID, action, topic)
}

// TestRequestDeliveryChecked: the ACL's delivery check applies to
// requests, whoever publishes them: an agent whose subscription was granted
// does not receive a request on a topic it may not read.
func TestRequestDeliveryChecked(t *testing.T) {
	for _, filter := range []string{sharedRequests, requestFilter} {
		t.Run(filter, func(t *testing.T) {
			e, pw := agentEnv(t, func(o *broker.Options) { o.Authorizer = readDenied{o.Authorizer, ctxReq} })
			pwp := e.addIdentity(t, "gw", acl.RolePlatform)
			in := agentOn(t, e, pw, "agent1-a", filter)
			gw := e.mustConnect(t, "gw-1", "gw", pwp, nil)

			bus := e.Broker.Bus()
			ctx := testContext(t)
			if err := bus.Publish(ctx, ctxReq, []byte("inline, denied")); err != nil {
				t.Fatal(err)
			}
			if err := bus.Publish(ctx, otherReq, []byte("inline sentinel")); err != nil {
				t.Fatal(err)
			}
			in.expectNext(t, otherReq, "inline sentinel")

			mustPublish(t, gw, ctxReq, 1, false, "network, denied")
			mustPublish(t, gw, otherReq, 1, false, "network sentinel")
			in.expectNext(t, otherReq, "network sentinel")
		})
	}
}

// TestExpiredSessionLeavesTree: a persistent session's filter stays in the
// tree while the session waits for its client; once the session expires,
// the filter leaves the tree too (mochi leaves it there), and requests reach
// only the agent that is connected.
func TestExpiredSessionLeavesTree(t *testing.T) {
	e, pw := agentEnv(t, func(o *broker.Options) { o.SessionExpiry = time.Second })
	in := agentOn(t, e, pw, "agent1-a", sharedRequests)

	persistent := func(o *paho.ClientOptions) { o.SetCleanSession(false) }
	c := e.mustConnect(t, "agent1-p", "agent1", pw, newInbox(), persistent)
	mustSubscribe(t, c, narrowRequests)
	c.Disconnect(50)
	eventually(t, "the persistent session's connection gone", func() bool { return e.Broker.ClientCount() == 1 })
	if !e.Broker.TreeMatches("agent1-p", ctxReq) {
		t.Fatal("the persistent session's filter left the tree at disconnect")
	}

	// mochi expires the session within a second or two.
	eventually(t, "the expired session's filter gone from the tree", func() bool { return !e.Broker.TreeMatches("agent1-p", ctxReq) })
	counts(t, e, 5, 1, in)
}
