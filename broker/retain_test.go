package broker_test

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/toolbus/toolbus/acl"
)

// Retained messages on request/response topics are dropped: not delivered,
// not kept for later subscribers. Presence stays retained.
func TestRetainedContextTopicsRejected(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)

	live := newInbox()
	agent := e.mustConnect(t, "agent1-a", "agent1", pwa, live)
	mustSubscribe(t, agent, requestFilter)
	gwIn := newInbox()
	gw := e.mustConnect(t, "gw-1", "gw", pwp, gwIn)
	mustSubscribe(t, gw, ctxReplies)

	// A v3 client gets its PUBACK (it could not hear a refusal), but
	// nothing is delivered or kept.
	mustPublish(t, gw, ctxReq, 1, true, "retained request")
	mustPublish(t, agent, ctxRes("agent1", "agent1-a"), 0, true, "retained response")
	mustPublish(t, agent, presence("agent1", "agent1-a"), 1, true, "online")
	mustPublish(t, gw, ctxReq, 1, false, "sentinel")
	live.expectNext(t, ctxReq, "sentinel")
	mustPublish(t, agent, ctxRes("agent1", "agent1-a"), 1, false, "sentinel")
	gwIn.expectNext(t, ctxRes("agent1", "agent1-a"), "sentinel")

	t.Run("later subscriber", func(t *testing.T) {
		in := newInbox()
		late := e.mustConnect(t, "agent1-b", "agent1", pwa, in)
		mustSubscribe(t, late, requestFilter)
		mustPublish(t, gw, ctxReq, 1, false, "sentinel 2")
		if m := in.expectNext(t, ctxReq, "sentinel 2"); m.retained {
			t.Error("sentinel arrived retained")
		}
		live.expectNext(t, ctxReq, "sentinel 2")
	})

	t.Run("inline subscriber", func(t *testing.T) {
		for _, filter := range []string{ctxReplies, ctxRes("agent1", "agent1-a")} {
			got := make(chan string, 4)
			if err := e.Broker.Bus().Subscribe(testContext(t), filter, func(topic string, payload []byte) { got <- string(payload) }); err != nil {
				t.Fatal(err)
			}
			select {
			case p := <-got:
				t.Fatalf("inline subscription to %s got a retained response %q", filter, p)
			default: // retained messages are delivered before Subscribe returns
			}
		}
	})

	t.Run("presence stays retained", func(t *testing.T) {
		in := newInbox()
		late := e.mustConnect(t, "gw-2", "gw", pwp, in)
		mustSubscribe(t, late, presenceFilter)
		if m := in.expectNext(t, presence("agent1", "agent1-a"), "online"); !m.retained {
			t.Error("presence not delivered as retained")
		}
	})

	t.Run("mqtt5 refusal code", func(t *testing.T) {
		c := dialRaw(t, e.Broker.Addr().String())
		if ack := c.connect("gw-v5", "gw", pwp, 30); ack.ReasonCode != 0 {
			t.Fatalf("CONNACK reason %#x", ack.ReasonCode)
		}
		for _, qos := range []byte{1, 2} {
			c.send(packets.Packet{
				FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: true},
				TopicName:   ctxReq,
				PacketID:    uint16(10 + qos),
				Payload:     []byte("retained v5 request"),
			})
			want := map[byte]byte{1: packets.Puback, 2: packets.Pubrec}[qos]
			ack := c.mustRecv(want)
			if ack.PacketID != uint16(10+qos) || ack.ReasonCode != packets.ErrNotAuthorized.Code {
				t.Errorf("QoS %d: ack id %d reason %#x, want id %d reason %#x", qos, ack.PacketID, ack.ReasonCode, 10+qos, packets.ErrNotAuthorized.Code)
			}
		}
		mustPublish(t, gw, ctxReq, 1, false, "sentinel 3")
		live.expectNext(t, ctxReq, "sentinel 3")
	})
}
