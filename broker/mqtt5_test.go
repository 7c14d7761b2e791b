package broker_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
)

// MQTT 5 clients log in through the same hook and get the v5 reason codes.
func TestMQTT5Client(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.MaxKeepAlive = 90 * time.Second })
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)

	t.Run("bad password", func(t *testing.T) {
		c := dialRaw(t, e.Broker.Addr().String())
		if ack := c.connect("agent1-x", "agent1", "wrong", 30); ack.ReasonCode != packets.ErrBadUsernameOrPassword.Code {
			t.Fatalf("CONNACK reason %#x, want %#x", ack.ReasonCode, packets.ErrBadUsernameOrPassword.Code)
		}
	})

	t.Run("anonymous", func(t *testing.T) {
		c := dialRaw(t, e.Broker.Addr().String())
		if ack := c.connect("anon", "", "", 30); ack.ReasonCode != packets.ErrBadUsernameOrPassword.Code {
			t.Fatalf("CONNACK reason %#x, want %#x", ack.ReasonCode, packets.ErrBadUsernameOrPassword.Code)
		}
	})

	c := dialRaw(t, e.Broker.Addr().String())
	ack := c.connect("agent1-a", "agent1", pwa, 0)
	if ack.ReasonCode != 0 {
		t.Fatalf("CONNACK reason %#x", ack.ReasonCode)
	}
	if !ack.Properties.ServerKeepAliveFlag || ack.Properties.ServerKeepAlive != 90 {
		t.Errorf("server keepalive = %t %d, want 90 s imposed on a client asking for none", ack.Properties.ServerKeepAliveFlag, ack.Properties.ServerKeepAlive)
	}

	c.send(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters: packets.Subscriptions{
			{Filter: "ff/v2/mcp/#", Qos: 1},
			{Filter: sharedRequests, Qos: 1},
			{Filter: "ff/v1/mcp/+/+/+/+/+/req", Qos: 1},
			{Filter: sharedRequestsOf("agent2"), Qos: 1},
		},
	})
	sub := c.mustRecv(packets.Suback)
	denied := packets.ErrNotAuthorized.Code
	if want := []byte{denied, 1, denied, denied}; !bytes.Equal(sub.ReasonCodes, want) {
		t.Errorf("SUBACK codes %#x, want %#x", sub.ReasonCodes, want)
	}

	c.send(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   ctxReq,
		PacketID:    2,
		Payload:     []byte("forged request"),
	})
	if pub := c.mustRecv(packets.Puback); pub.ReasonCode != packets.ErrNotAuthorized.Code {
		t.Errorf("PUBACK reason %#x, want %#x", pub.ReasonCode, packets.ErrNotAuthorized.Code)
	}

	// Topic aliases are off: mochi would check the ACL on the empty topic
	// name of an aliased PUBLISH instead of the topic it stands for.
	c.send(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish},
		TopicName:   ctxRes("agent1", "agent1-a"),
		Properties:  packets.Properties{TopicAlias: 1, TopicAliasFlag: true},
		Payload:     []byte("aliased"),
	})
	for {
		pk, err := c.recv()
		if err != nil {
			break // closed: what we want
		}
		if pk.FixedHeader.Type == packets.Disconnect {
			if pk.ReasonCode != packets.ErrTopicAliasInvalid.Code {
				t.Errorf("DISCONNECT reason %#x, want %#x", pk.ReasonCode, packets.ErrTopicAliasInvalid.Code)
			}
			break
		}
	}
}
