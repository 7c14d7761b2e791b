package broker_test

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/toolbus/toolbus/acl"
)

// What docs/protocol.md ("When the broker refuses") tells an MQTT 3.1.1
// agent: a refused filter is 0x80 in SUBACK, a refused QoS 0 publish is
// dropped with the connection kept, a refused QoS 1 publish closes the
// connection.
func TestRefusalsSeenByMQTT311(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	c := dialRaw(t, e.Broker.Addr().String())
	c.version = 4
	if ack := c.connect("agent1-a", "agent1", pwa, 30); ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}

	c.send(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: "ff/v2/mcp/#", Qos: 0}, {Filter: sharedRequests, Qos: 0}},
	})
	if sub := c.mustRecv(packets.Suback); !bytes.Equal(sub.ReasonCodes, []byte{0x80, 0}) {
		t.Errorf("SUBACK codes %#x, want [0x80 0x00]: a refused filter, the agent's own requests", sub.ReasonCodes)
	}

	// QoS 0: dropped; a PINGREQ after it is still answered.
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: ctxReq, Payload: []byte("forged")})
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	c.mustRecv(packets.Pingresp)

	// QoS 1: the connection is closed, nothing acknowledged.
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: ctxReq, PacketID: 2, Payload: []byte("forged")})
	for {
		pk, err := c.recv()
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("a refused QoS 1 publish left the connection open: %v", err)
		}
		if err != nil {
			return // closed, as documented
		}
		if pk.FixedHeader.Type == packets.Puback {
			t.Fatalf("a refused QoS 1 publish was acknowledged on MQTT 3.1.1")
		}
	}
}
