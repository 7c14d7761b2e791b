package expertagent

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// FuzzLeanReadPacket: whatever the broker sends, the lean client's decoder
// returns a packet or an error (a protocol error, the broker's DISCONNECT
// or a short read), never a panic; and a PUBLISH it decodes encodes back to the same bytes.
func FuzzLeanReadPacket(f *testing.F) {
	seed := func(p packets.ControlPacket) {
		var b bytes.Buffer
		_ = p.Write(&b)
		f.Add(b.Bytes())
	}
	pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	pub.Qos, pub.MessageID, pub.TopicName, pub.Payload = 1, 513, "ff/v1/mcp/p/u/s/_/_/req", []byte(`{"v":1}`)
	seed(pub)
	seed(puback(7))
	sub := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
	sub.MessageID, sub.ReturnCodes = 2, []byte{1, 0x80}
	seed(sub)
	seed(packets.NewControlPacket(packets.Connack))
	seed(packets.NewControlPacket(packets.Pingresp))
	seed(packets.NewControlPacket(packets.Disconnect))
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{0x32, 0x04, 0x00, 0x01, 'a', 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(in), 16)
		for {
			p, err := leanReadPacket(r)
			if err != nil {
				if !errors.Is(err, errLeanProtocol) && !errors.Is(err, errLeanBrokerDisconnect) &&
					!errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("error %v: neither a protocol error, a DISCONNECT nor a short read", err)
				}
				return
			}
			if p.kind != leanPublish {
				continue
			}
			b := leanPublishHeader(nil, p.topic, p.id, p.qos(), p.flags&1 != 0, p.flags&8 != 0, len(p.payload))
			b = append(b, p.payload...)
			again, err := leanReadPacket(bufio.NewReader(bytes.NewReader(b)))
			if err != nil || again.topic != p.topic || again.id != p.id || again.flags != p.flags || !bytes.Equal(again.payload, p.payload) {
				t.Fatalf("PUBLISH %+v re-encoded as %x decodes to %+v (%v)", p, b, again, err)
			}
		}
	})
}

// FuzzLeanEncode: what the lean client writes, paho's codec reads back
// the same (PUBLISH, SUBSCRIBE, CONNECT).
func FuzzLeanEncode(f *testing.F) {
	f.Add("ff/v1/mcp/p/u/s/_/_/res", []byte(`{"v":1}`), uint16(1), byte(1), "agent", "pw")
	f.Add("a", []byte{}, uint16(65535), byte(0x0f), "", "")
	f.Fuzz(func(t *testing.T, topic string, payload []byte, id uint16, flags byte, user, pass string) {
		if id == 0 {
			id = 1
		}
		qos, retain, dup := flags&1, flags&2 != 0, flags&4 != 0
		if err := leanCheckPublish(topic, len(payload)); err == nil {
			b := append(leanPublishHeader(nil, topic, id, qos, retain, dup, len(payload)), payload...)
			p, err := packets.ReadPacket(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("paho cannot read our PUBLISH %x: %v", b, err)
			}
			pp := p.(*packets.PublishPacket)
			if pp.TopicName != topic || pp.Qos != qos || pp.Retain != retain || pp.Dup != dup || !bytes.Equal(pp.Payload, payload) ||
				(qos > 0 && pp.MessageID != id) {
				t.Fatalf("PUBLISH read back as %v", pp)
			}
		}
		filters := []string{topic, "$share/g/" + topic}
		if leanCheckFilters(filters) == nil {
			b := leanAppendSubscribe(nil, id, 1, filters)
			p, err := packets.ReadPacket(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("paho cannot read our SUBSCRIBE %x: %v", b, err)
			}
			if sp := p.(*packets.SubscribePacket); sp.MessageID != id || len(sp.Topics) != 2 || sp.Topics[0] != topic || sp.Topics[1] != filters[1] {
				t.Fatalf("SUBSCRIBE read back as %v", sp)
			}
		}
		b, err := leanAppendConnect(nil, &leanConnectPacket{clientID: user, username: user, password: pass, keepAlive: id,
			willTopic: topic, willPayload: payload, willQoS: qos, willRetain: retain})
		if err != nil {
			return
		}
		p, err := packets.ReadPacket(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("paho cannot read our CONNECT %x: %v", b, err)
		}
		cp := p.(*packets.ConnectPacket)
		if cp.ClientIdentifier != user || cp.Username != user || string(cp.Password) != pass || cp.Keepalive != id ||
			cp.WillFlag != (topic != "") || (topic != "" && (cp.WillTopic != topic || !bytes.Equal(cp.WillMessage, payload) || cp.WillQos != qos || cp.WillRetain != retain)) {
			t.Fatalf("CONNECT read back as %v", cp)
		}
	})
}

// TestLeanReadBrokerDisconnect: a DISCONNECT from the broker (mochi sends
// one as it shuts down) ends the connection as closed, not as a protocol
// error.
func TestLeanReadBrokerDisconnect(t *testing.T) {
	var b bytes.Buffer
	if err := packets.NewControlPacket(packets.Disconnect).Write(&b); err != nil {
		t.Fatal(err)
	}
	_, err := leanReadPacket(bufio.NewReader(&b))
	if !errors.Is(err, errLeanBrokerDisconnect) || errors.Is(err, errLeanProtocol) {
		t.Fatalf("DISCONNECT read as %v, want errLeanBrokerDisconnect", err)
	}
}
