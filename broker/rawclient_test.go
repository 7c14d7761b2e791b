package broker_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// rawClient speaks MQTT 5 over a plain TCP connection, encoding and decoding
// with mochi's packets package: paho.mqtt.golang is 3.1.1 only, and the
// tests need to see v5 reason codes.
type rawClient struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
	// version is the protocol version it speaks: 5 unless set (4 is MQTT
	// 3.1.1).
	version byte
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rawClient{t: t, conn: conn, r: bufio.NewReader(conn)}
}

func (c *rawClient) send(pk packets.Packet) {
	c.t.Helper()
	pk.ProtocolVersion = 5
	if c.version != 0 {
		pk.ProtocolVersion = c.version
	}
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		pk.Connect.ProtocolName = []byte("MQTT")
		err = pk.ConnectEncode(&buf)
	case packets.Publish:
		err = pk.PublishEncode(&buf)
	case packets.Subscribe:
		err = pk.SubscribeEncode(&buf)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&buf)
	case packets.Pingreq:
		err = pk.PingreqEncode(&buf)
	default:
		err = fmt.Errorf("rawClient cannot send packet type %d", pk.FixedHeader.Type)
	}
	if err != nil {
		c.t.Fatalf("encode: %v", err)
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(waitFor))
	if _, err := c.conn.Write(buf.Bytes()); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// recv reads the next packet; io.EOF (or another read error) when the
// broker closed the connection.
func (c *rawClient) recv() (packets.Packet, error) {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(waitFor))
	b, err := c.r.ReadByte()
	if err != nil {
		return packets.Packet{}, err
	}
	pk := packets.Packet{ProtocolVersion: 5}
	if c.version != 0 {
		pk.ProtocolVersion = c.version
	}
	if err := pk.FixedHeader.Decode(b); err != nil {
		return pk, err
	}
	n, mul := 0, 1
	for {
		d, err := c.r.ReadByte()
		if err != nil {
			return pk, err
		}
		n += int(d&127) * mul
		if d&128 == 0 {
			break
		}
		mul *= 128
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return pk, err
	}
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	}
	return pk, err
}

func (c *rawClient) mustRecv(want byte) packets.Packet {
	c.t.Helper()
	pk, err := c.recv()
	if err != nil {
		c.t.Fatalf("read %s: %v", packets.PacketNames[want], err)
	}
	if pk.FixedHeader.Type != want {
		c.t.Fatalf("got %s, want %s", packets.PacketNames[pk.FixedHeader.Type], packets.PacketNames[want])
	}
	return pk
}

// connect sends CONNECT and returns the CONNACK.
func (c *rawClient) connect(clientID, username, password string, keepalive uint16) packets.Packet {
	c.t.Helper()
	return c.connectWith(clientID, username, password, keepalive, nil)
}

// connectWill is connect with a retained QoS 1 Will.
func (c *rawClient) connectWill(clientID, username, password, willTopic, willPayload string) packets.Packet {
	c.t.Helper()
	return c.connectWith(clientID, username, password, 30, func(p *packets.ConnectParams) {
		p.WillFlag = true
		p.WillTopic = willTopic
		p.WillPayload = []byte(willPayload)
		p.WillQos = 1
		p.WillRetain = true
	})
}

func (c *rawClient) connectWith(clientID, username, password string, keepalive uint16, mod func(*packets.ConnectParams)) packets.Packet {
	c.t.Helper()
	p := packets.ConnectParams{
		ClientIdentifier: clientID,
		Clean:            true,
		Keepalive:        keepalive,
		UsernameFlag:     username != "",
		Username:         []byte(username),
		PasswordFlag:     password != "",
		Password:         []byte(password),
	}
	if mod != nil {
		mod(&p)
	}
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, Connect: p})
	return c.mustRecv(packets.Connack)
}
