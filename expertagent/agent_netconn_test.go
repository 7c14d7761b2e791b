package expertagent

import (
	"bytes"
	"net"
	"net/url"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

func TestAgentOpenConnectionSchemes(t *testing.T) {
	tests := []struct {
		url, proxy string
		want       bool
	}{
		{url: "tcp://127.0.0.1:1883", want: true},
		{url: "mqtt://broker:1883", want: true},
		{url: "ssl://broker:8883"},
		{url: "tls://broker:8883"},
		{url: "ws://broker:8080/mqtt"},
		{url: "wss://broker/mqtt"},
		{url: "unix:///tmp/mqtt.sock"},
		{url: "tcp://127.0.0.1:1883", proxy: "socks5://127.0.0.1:1080"},
		{url: "::not a url"},
	}
	for _, tc := range tests {
		t.Run(tc.url+" "+tc.proxy, func(t *testing.T) {
			t.Setenv("ALL_PROXY", tc.proxy)
			t.Setenv("all_proxy", "")
			if got := agentOpenConnection(tc.url) != nil; got != tc.want {
				t.Errorf("agentOpenConnection(%q) with ALL_PROXY=%q: opens itself %v, want %v", tc.url, tc.proxy, got, tc.want)
			}
		})
	}
}

// TestAgentBufferedConnReadsPackets: packets that arrive in one segment are
// read one by one through the buffer, and what follows them still arrives.
func TestAgentBufferedConnReadsPackets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })

	var burst bytes.Buffer
	var want []uint16
	for id := uint16(1); id <= 3; id++ {
		ack := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
		ack.MessageID = id
		if err := ack.Write(&burst); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	pub.TopicName, pub.Payload = "ff/v1/mcp/p/u/s/_/_/req", bytes.Repeat([]byte("x"), 3*agentReadBufferSize) // larger than the buffer
	if err := pub.Write(&burst); err != nil {
		t.Fatal(err)
	}

	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, err = c.Write(burst.Bytes())
			_ = c.Close()
		}
		served <- err
	}()

	u, _ := url.Parse("tcp://" + ln.Addr().String())
	open := agentOpenConnection(u.String())
	conn, err := open(u, *mqtt.NewClientOptions().SetConnectTimeout(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, id := range want {
		p, err := packets.ReadPacket(conn)
		if err != nil {
			t.Fatal(err)
		}
		if ack, ok := p.(*packets.PubackPacket); !ok || ack.MessageID != id {
			t.Fatalf("packet %v, want PUBACK %d", p, id)
		}
	}
	p, err := packets.ReadPacket(conn)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := p.(*packets.PublishPacket); !ok || got.TopicName != pub.TopicName || !bytes.Equal(got.Payload, pub.Payload) {
		t.Fatalf("packet %v, want the PUBLISH", p)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

func writePacket(t *testing.T, w net.Conn, p packets.ControlPacket) {
	t.Helper()
	if err := p.Write(w); err != nil {
		t.Fatal(err)
	}
}

func puback(id uint16) *packets.PubackPacket {
	ack := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
	ack.MessageID = id
	return ack
}

// TestAgentConnAckRidesWithReply: a PUBACK is held until the next write
// and then leaves before it; nothing is on the wire while it is held.
func TestAgentConnAckRidesWithReply(t *testing.T) {
	raw, peer := tcpPair(t)
	c := newAgentConn(raw)
	c.ackDelay = time.Hour // only the reply may carry the acks out
	t.Cleanup(func() { _ = c.Close() })

	writePacket(t, c, puback(7))
	writePacket(t, c, puback(8))
	_ = peer.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := peer.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes (%v) while the acks are held, want a timeout", n, err)
	}

	pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	pub.Qos, pub.MessageID, pub.TopicName, pub.Payload = 1, 3, "ff/v1/mcp/p/u/s/_/_/res", []byte(`{"x":1}`)
	writePacket(t, c, pub)

	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, id := range []uint16{7, 8} {
		p, err := packets.ReadPacket(peer)
		if err != nil {
			t.Fatal(err)
		}
		if ack, ok := p.(*packets.PubackPacket); !ok || ack.MessageID != id {
			t.Fatalf("packet %v, want PUBACK %d", p, id)
		}
	}
	p, err := packets.ReadPacket(peer)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := p.(*packets.PublishPacket); !ok || got.MessageID != 3 || !bytes.Equal(got.Payload, pub.Payload) {
		t.Fatalf("packet %v, want the PUBLISH", p)
	}
}

// TestAgentConnAckAloneAfterDelay: with no reply to ride along with, a held
// PUBACK still leaves once the delay runs out; after Close nothing is held.
func TestAgentConnAckAloneAfterDelay(t *testing.T) {
	raw, peer := tcpPair(t)
	c := newAgentConn(raw)
	writePacket(t, c, puback(42))
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := packets.ReadPacket(peer)
	if err != nil {
		t.Fatal(err)
	}
	if ack, ok := p.(*packets.PubackPacket); !ok || ack.MessageID != 42 {
		t.Fatalf("packet %v, want PUBACK 42", p)
	}

	c.ackDelay = time.Hour
	writePacket(t, c, puback(43))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := packets.ReadPacket(peer); err == nil {
		t.Fatal("read a packet after Close, want EOF: the held ack is dropped")
	}
}
