package broker_test

import (
	"testing"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/acl"
)

// A client ID taken over by a new login (an agent restarted before the
// broker saw its old connection die) keeps the new login's presence: the
// old connection's presence Will is void. mochi sends it from the old
// connection's goroutine, often after the new connection's "online", so
// without the takeover hook a few rounds end "offline".
func TestTakeoverVoidsPresenceWill(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)
	in := newInbox()
	gw := e.mustConnect(t, "gw-1", "gw", pwp, in)
	mustSubscribe(t, gw, presenceFilter)

	agent := presence("agent1", "agent1-a")
	for round := range 10 {
		clients := e.Broker.ClientCount()
		c := e.mustConnect(t, "agent1-a", "agent1", pwa, nil, withWill(agent, "offline", true))
		mustPublish(t, c, agent, 1, true, "online")
		// The old connection's goroutine, which would publish its Will,
		// is done once the count is back (plus the new one, on the first
		// round).
		want := clients
		if round == 0 {
			want++
		}
		eventually(t, "the old connection gone", func() bool { return e.Broker.ClientCount() == want })
		mustPublish(t, gw, ctxReq, 1, false, "barrier") // gw's own packets are handled in order
		for {
			m := in.next(t)
			if m.topic == agent && m.payload == "offline" {
				t.Fatalf("round %d: the taken-over connection's Will was published", round)
			}
			if m.topic == agent && m.payload == "online" && !m.retained {
				break
			}
		}
	}

	// A Will that is not void still comes: the last connection dies.
	late := newInbox()
	gw2 := e.mustConnect(t, "gw-2", "gw", pwp, late)
	mustSubscribe(t, gw2, presenceFilter)
	if m := late.expectNext(t, agent, "online"); !m.retained {
		t.Error("the retained status is not online")
	}
	kill, cut := killable()
	e.mustConnect(t, "agent1-a", "agent1", pwa, nil, kill, withWill(agent, "offline", true))
	cut()
	late.expectNext(t, agent, "offline")
	eventually(t, "every replaced connection seen to its end", func() bool { return e.Broker.PendingTakeovers() == 0 })
}

// TestTakeoverRaceRepaired: when the replaced connection's goroutine wins
// mochi's clean takeover race, it deletes the client ID from the registry
// and its filters from the tree, and the new connection, still open,
// receives nothing. The takeover hook registers it again and puts its
// filters back.
func TestTakeoverRaceRepaired(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)
	gw := e.mustConnect(t, "gw-1", "gw", pwp, nil)

	e.mustConnect(t, "agent1-a", "agent1", pwa, nil)
	in := newInbox()
	agent := e.mustConnect(t, "agent1-a", "agent1", pwa, in) // takes the session over
	mustSubscribe(t, agent, requestFilter)
	mustPublish(t, gw, ctxReq, 1, false, "before")
	in.expectNext(t, ctxReq, "before")

	repair := e.Broker.LoseTakeoverRace("agent1-a")
	if e.Broker.Registered("agent1-a") || e.Broker.TreeMatches("agent1-a", ctxReq) {
		t.Fatalf("the race lost nothing: registered %v, filter in the tree %v", e.Broker.Registered("agent1-a"), e.Broker.TreeMatches("agent1-a", ctxReq))
	}
	repair()
	if !e.Broker.Registered("agent1-a") || !e.Broker.TreeMatches("agent1-a", ctxReq) {
		t.Fatalf("after the repair: registered %v, filter in the tree %v", e.Broker.Registered("agent1-a"), e.Broker.TreeMatches("agent1-a", ctxReq))
	}
	mustPublish(t, gw, ctxReq, 1, false, "after")
	in.expectNext(t, ctxReq, "after")
	if err := e.Broker.Bus().Publish(testContext(t), ctxReq, []byte("inline")); err != nil {
		t.Fatal(err)
	}
	in.expectNext(t, ctxReq, "inline")

	// A platform identity's reply filter comes back too, and
	// replies reach it.
	e.mustConnect(t, "gw-2", "gw", pwp, nil)
	replies := newInbox()
	gw2 := e.mustConnect(t, "gw-2", "gw", pwp, replies)
	mustSubscribe(t, gw2, ctxReplies)
	reply := ctxRes("agent1", "agent1-a")
	repair = e.Broker.LoseTakeoverRace("gw-2")
	repair()
	if !e.Broker.Registered("gw-2") || !e.Broker.TreeMatches("gw-2", reply) {
		t.Fatalf("after the repair: registered %v, filter in the tree %v", e.Broker.Registered("gw-2"), e.Broker.TreeMatches("gw-2", reply))
	}
	mustPublish(t, agent, reply, 1, false, "reply")
	replies.expectNext(t, reply, "reply")
	// The PUBACK first: mochi refuses an UNSUBSCRIBE whose packet ID is
	// that of a delivery in flight (docs/upstream.md).
	eventually(t, "the delivery acknowledged", func() bool { return e.Broker.Stats().Inflight == 0 })
	if err := wait(t, gw2.Unsubscribe(ctxReplies)); err != nil {
		t.Fatal(err)
	}
	if e.Broker.TreeMatches("gw-2", reply) {
		t.Error("the repaired client's filter still in the tree after it unsubscribed")
	}

	// A login that took the ID while the successor was out of the
	// registry found nothing to take over: the repair ends the successor,
	// as the takeover would have.
	repair = e.Broker.LoseTakeoverRace("agent1-a")
	laterIn := newInbox()
	later := e.mustConnect(t, "agent1-a", "agent1", pwa, laterIn)
	mustSubscribe(t, later, requestFilter)
	repair()
	eventually(t, "the successor that missed its takeover disconnected", func() bool { return !agent.IsConnectionOpen() })
	// mochi's cleanup of that connection deletes the ID and its filters
	// (the later login's), and the repair, once the connection ended,
	// puts them back: a request published in between reaches nobody.
	eventually(t, "the later login repaired", func() bool {
		return e.Broker.PendingTakeovers() == 0 && e.Broker.Registered("agent1-a") && e.Broker.TreeMatches("agent1-a", ctxReq)
	})
	if !later.IsConnectionOpen() {
		t.Fatal("the later login lost its connection")
	}
	mustPublish(t, gw, ctxReq, 1, false, "to the later login")
	laterIn.expectNext(t, ctxReq, "to the later login")
}

// TestTakeoverOfEndedSession: a persistent session whose connection ended
// is taken over by its next login; nothing is left waiting for the old
// connection to end (it has), and the new one gets what the session holds.
func TestTakeoverOfEndedSession(t *testing.T) {
	e := newEnv(t)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)
	persistent := func(o *paho.ClientOptions) { o.SetCleanSession(false) }
	for range 3 {
		c := e.mustConnect(t, "gw-p", "gw", pwp, nil, persistent)
		mustSubscribe(t, c, ctxReplies)
		c.Disconnect(50)
		eventually(t, "the connection gone", func() bool { return e.Broker.ClientCount() == 0 })
	}
	if n := e.Broker.PendingTakeovers(); n != 0 {
		t.Errorf("%d replaced connections waited for, want 0", n)
	}
}
