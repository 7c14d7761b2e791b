package broker_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
)

// receivers polls until the request route names want (nil: mochi's way).
func receivers(t *testing.T, e *testEnv, want ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("request route %v", want), func() bool {
		return slices.Equal(e.Broker.RequestReceivers(), want)
	})
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

// counts publishes n requests and counts, per inbox, the payloads that
// arrived; every payload must arrive exactly `copies` times in all.
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
	for total := 0; total < n*copies; {
		select {
		case <-timeAfter():
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

func TestRequestRoute(t *testing.T) {
	t.Run("one agent: written straight to its socket", func(t *testing.T) {
		e, pw := agentEnv(t)
		in := agentOn(t, e, pw, "agent1-a", sharedRequests)
		receivers(t, e, "agent1-a")
		before := e.Broker.Stats().MessagesSent
		counts(t, e, 50, 1, in)
		if sent := e.Broker.Stats().MessagesSent - before; sent != 50 {
			t.Errorf("MessagesSent grew by %d, want 50", sent)
		}
	})

	t.Run("one agent on a plain subscription: the same", func(t *testing.T) {
		e, pw := agentEnv(t)
		in := agentOn(t, e, pw, "agent1-a", requestFilter)
		receivers(t, e, "agent1-a")
		counts(t, e, 20, 1, in)
	})

	t.Run("a group of two shares the requests", func(t *testing.T) {
		e, pw := agentEnv(t)
		in1, in2 := agentOn(t, e, pw, "agent1-a", sharedRequests), agentOn(t, e, pw, "agent1-b", sharedRequests)
		receivers(t, e, "agent1-a", "agent1-b")
		if got := counts(t, e, 40, 1, in1, in2); got[0] != 20 || got[1] != 20 {
			t.Errorf("split %v, want round robin 20/20", got)
		}
	})

	t.Run("two groups: each gets every request, through mochi", func(t *testing.T) {
		e, pw := agentEnv(t)
		in1, in2 := agentOn(t, e, pw, "agent1-a", sharedRequests), agentOn(t, e, pw, "agent1-b", "$share/others/"+requestFilter)
		receivers(t, e)
		if got := counts(t, e, 20, 2, in1, in2); got[0] != 20 || got[1] != 20 {
			t.Errorf("got %v, want 20 each", got)
		}
	})

	t.Run("a filter naming a context level turns the route off while it is there", func(t *testing.T) {
		e, pw := agentEnv(t)
		in := agentOn(t, e, pw, "agent1-a", sharedRequests)
		receivers(t, e, "agent1-a")
		narrow := make(chan inlineMsg, 64)
		ctx := testContext(t)
		if err := e.Broker.Bus().Subscribe(ctx, "ff/v1/mcp/plat1/+/+/+/+/req", chanHandler(narrow)); err != nil {
			t.Fatal(err)
		}
		receivers(t, e)
		counts(t, e, 10, 1, in)
		for range 10 {
			if m := nextInline(t, narrow); m.topic != ctxReq {
				t.Fatalf("inline subscriber got %+v", m)
			}
		}
		if err := e.Broker.Bus().Unsubscribe(ctx, "ff/v1/mcp/plat1/+/+/+/+/req"); err != nil {
			t.Fatal(err)
		}
		receivers(t, e, "agent1-a")
		counts(t, e, 5, 1, in)
		select {
		case m := <-narrow:
			t.Fatalf("the unsubscribed inline handler got %+v", m)
		default:
		}
	})

	t.Run("a new connection of the agent is found", func(t *testing.T) {
		e, pw := agentEnv(t)
		in1 := newInbox()
		a := e.mustConnect(t, "agent1-a", "agent1", pw, in1)
		mustSubscribe(t, a, sharedRequests)
		receivers(t, e, "agent1-a")
		counts(t, e, 5, 1, in1)
		a.Disconnect(100)
		receivers(t, e)
		in2 := agentOn(t, e, pw, "agent1-a", sharedRequests)
		receivers(t, e, "agent1-a")
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
		receivers(t, e, "agent1-v5")
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

	t.Run("inline QoS 1: through mochi", func(t *testing.T) {
		e, pw := agentEnv(t, func(o *broker.Options) { o.InlineQoS = 1 })
		in := agentOn(t, e, pw, "agent1-a", sharedRequests)
		receivers(t, e)
		counts(t, e, 5, 1, in)
	})
}

// A filter the ACL refuses changes nothing; a granted one that names a
// context level turns the route off.
func TestRequestRouteNetworkFilters(t *testing.T) {
	e, pw := agentEnv(t)
	in := newInbox()
	a := e.mustConnect(t, "agent1-a", "agent1", pw, in)
	mustSubscribe(t, a, sharedRequests)
	receivers(t, e, "agent1-a")
	if codes := subscribe(t, a, "ff/v1/mcp/plat1/#"); len(codes) != 1 || codes[0] < 0x80 {
		t.Fatalf("ff/v1/mcp/plat1/# granted to an agent: %#x", codes)
	}
	receivers(t, e, "agent1-a")
	counts(t, e, 5, 1, in)

	// A filter naming a context level: requests differ in their
	// receivers, so they take mochi's way while it is in the tree.
	const narrowFilter = "ff/v1/mcp/plat1/+/+/+/+/req"
	narrowIn := newInbox()
	b := e.mustConnect(t, "agent1-b", "agent1", pw, narrowIn)
	mustSubscribe(t, b, narrowFilter)
	receivers(t, e)
	got := counts(t, e, 5, 2, in, narrowIn)
	if got[0] != 5 || got[1] != 5 {
		t.Errorf("got %v, want 5 each", got)
	}

	// Unsubscribed, the route comes back.
	if err := wait(t, b.Unsubscribe(narrowFilter)); err != nil {
		t.Fatal(err)
	}
	receivers(t, e, "agent1-a")
	counts(t, e, 5, 1, in)

	// And again after a client holding one goes.
	c := e.mustConnect(t, "agent1-c", "agent1", pw, newInbox())
	mustSubscribe(t, c, narrowFilter, "ff/v1/mcp/+/alice/+/+/+/req")
	receivers(t, e)
	c.Disconnect(0)
	receivers(t, e, "agent1-a")
	counts(t, e, 5, 1, in)
}

// TestRequestRouteSessionExpiry: a persistent session holding a filter
// that names a context level keeps the route off after it disconnects;
// once the session expires its filter leaves the tree (mochi leaves it
// there) and the route comes back.
func TestRequestRouteSessionExpiry(t *testing.T) {
	e, pw := agentEnv(t, func(o *broker.Options) { o.SessionExpiry = time.Second })
	in := agentOn(t, e, pw, "agent1-a", sharedRequests)
	receivers(t, e, "agent1-a")

	persistent := func(o *paho.ClientOptions) { o.SetCleanSession(false) }
	c := e.mustConnect(t, "agent1-p", "agent1", pw, newInbox(), persistent)
	mustSubscribe(t, c, "ff/v1/mcp/plat1/+/+/+/+/req")
	receivers(t, e)
	c.Disconnect(50)
	if got := e.Broker.RequestReceivers(); len(got) != 0 {
		t.Fatalf("route %v while the disconnected session still holds its filter", got)
	}
	if !e.Broker.TreeMatches("agent1-p", ctxReq) {
		t.Fatal("the persistent session's filter left the tree at disconnect")
	}

	receivers(t, e, "agent1-a") // mochi expires the session within a second or two
	if e.Broker.TreeMatches("agent1-p", ctxReq) {
		t.Error("the expired session's filter is still in the tree")
	}
	counts(t, e, 5, 1, in)
}
