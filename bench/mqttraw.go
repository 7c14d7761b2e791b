package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// rawMQTT is the MQTT floor's lean requester: MQTT 3.1.1 over one TCP
// connection, packets encoded and decoded with mochi's packets package.
// Workers write their PUBLISH straight to the socket; one reader goroutine
// hands each reply to deliver and acknowledges QoS 1 ones. paho moves every
// packet through several goroutines and, measured beside it, cost the load
// generator about three times the CPU per call of the HTTP client: the
// floor was the requester's, not the broker's and the agent's.
//
// It serves a benchmark: no reconnect, no session state, and the PUBACKs
// of QoS 1 requests are read and not waited for (the reply is the
// acknowledgement that counts). Every write is bounded; a lost connection
// fails the next publish at once.
type rawMQTT struct {
	conn         net.Conn
	deliver      func(payload []byte) // on the reader goroutine: must not block
	writeTimeout time.Duration        // bound of every write
	stopCtx      func() bool          // undoes the context.AfterFunc of dial

	wmu      sync.Mutex
	wbuf     bytes.Buffer
	id       uint16
	deadline time.Time // the write deadline set last
	subID    uint16    // the SUBSCRIBE waiting for its SUBACK (under wmu)

	subacks chan []byte   // reason codes of the awaited SUBACK
	done    chan struct{} // closed when the reader returns
	stop    chan struct{} // closed by close: stops the pinger
	pinged  chan struct{} // closed when the pinger returns
	err     error         // why the reader stopped; read after done
}

// rawMQTTKeepalive is the keepalive the requester announces; it pings at
// a third of it.
const rawMQTTKeepalive = 30 * time.Second

// dialRawMQTT connects to brokerURL (tcp://host:port) and logs in. Every
// write is bounded by timeout, and ctx's end closes the connection's I/O
// down (a cancelled run does not wait for a stuck broker).
func dialRawMQTT(ctx context.Context, brokerURL, clientID, username, password string, timeout time.Duration, deliver func([]byte)) (*rawMQTT, error) {
	u, err := url.Parse(brokerURL)
	if err != nil || (u.Scheme != "tcp" && u.Scheme != "mqtt") || u.Host == "" {
		return nil, fmt.Errorf("broker URL %q: want tcp://host:port", brokerURL)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	c := &rawMQTT{conn: conn, deliver: deliver, writeTimeout: timeout, subacks: make(chan []byte, 1),
		done: make(chan struct{}), stop: make(chan struct{}), pinged: make(chan struct{})}
	c.stopCtx = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	fail := func(what string, err error) (*rawMQTT, error) {
		c.stopCtx()
		conn.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	connect := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: clientID, Clean: true,
			Keepalive: uint16(rawMQTTKeepalive / time.Second),
			Username:  []byte(username), UsernameFlag: username != "", Password: []byte(password), PasswordFlag: password != ""}}
	r := bufio.NewReaderSize(conn, 64<<10)
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	if err := c.write(connect.ConnectEncode); err != nil {
		return fail("connect", err)
	}
	ack, err := readRawPacket(r)
	if err != nil {
		return fail("connect", err)
	}
	if ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 {
		return fail("connect", fmt.Errorf("refused: packet type %d, code %#x", ack.FixedHeader.Type, ack.ReasonCode))
	}
	_ = conn.SetReadDeadline(time.Time{}) // the broker may stay silent: the reader waits
	go c.read(r)
	go c.ping()
	return c, nil
}

// write encodes one packet with enc and writes it, under the write lock.
func (c *rawMQTT) write(enc func(*bytes.Buffer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(enc)
}

// writeLocked writes what enc encodes, bounded by writeTimeout: the
// deadline moves forward only when less than half of it is left, so most
// writes need no syscall for it. A failed write may have sent part of a
// packet: the connection is closed, and the reader reports why.
func (c *rawMQTT) writeLocked(enc func(*bytes.Buffer) error) error {
	c.wbuf.Reset()
	if err := enc(&c.wbuf); err != nil {
		return err
	}
	if now := time.Now(); c.deadline.Sub(now) < c.writeTimeout/2 {
		c.deadline = now.Add(c.writeTimeout)
		if err := c.conn.SetWriteDeadline(c.deadline); err != nil {
			return err
		}
	}
	if _, err := c.conn.Write(c.wbuf.Bytes()); err != nil {
		_ = c.conn.Close()
		return err
	}
	return nil
}

// nextID returns a packet identifier; called with wmu held.
func (c *rawMQTT) nextID() uint16 {
	c.id++
	if c.id == 0 {
		c.id = 1
	}
	return c.id
}

// publish sends payload on topic at qos (0 or 1), not retained.
func (c *rawMQTT) publish(topic string, qos byte, payload []byte) error {
	select {
	case <-c.done:
		return fmt.Errorf("connection lost: %w", c.err)
	default:
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, ProtocolVersion: 4,
		TopicName: topic, Payload: payload}
	if qos > 0 {
		pk.PacketID = c.nextID()
	}
	return c.writeLocked(pk.PublishEncode)
}

// subscribe subscribes to filter at qos and waits for its SUBACK; one
// subscribe at a time.
func (c *rawMQTT) subscribe(ctx context.Context, filter string, qos byte) error {
	select { // a SUBACK that came after an earlier subscribe gave up
	case <-c.subacks:
	default:
	}
	err := c.write(func(b *bytes.Buffer) error {
		c.subID = c.nextID()
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 4,
			PacketID: c.subID, Filters: packets.Subscriptions{{Filter: filter, Qos: qos}}}
		return pk.SubscribeEncode(b)
	})
	if err != nil {
		return err
	}
	select {
	case codes := <-c.subacks:
		if len(codes) != 1 || codes[0] >= 0x80 {
			return fmt.Errorf("refused by the broker (SUBACK % x)", codes)
		}
		return nil
	case <-c.done:
		return fmt.Errorf("connection lost: %w", c.err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read handles packets until the connection fails or is closed; then it
// closes the connection, so that writers fail at once too.
func (c *rawMQTT) read(r *bufio.Reader) {
	defer close(c.done)
	defer c.conn.Close()
	for {
		pk, err := readRawPacket(r)
		if err != nil {
			c.err = err
			return
		}
		switch pk.FixedHeader.Type {
		case packets.Publish:
			// The reply first: its latency does not include our PUBACK.
			c.deliver(pk.Payload)
			if pk.FixedHeader.Qos == 1 {
				ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, ProtocolVersion: 4, PacketID: pk.PacketID}
				if err := c.write(ack.PubackEncode); err != nil {
					c.err = err
					return
				}
			}
		case packets.Suback:
			c.wmu.Lock()
			awaited := pk.PacketID == c.subID
			c.wmu.Unlock()
			if awaited {
				select {
				case c.subacks <- pk.ReasonCodes:
				default:
				}
			}
		case packets.Puback, packets.Pingresp:
		default:
			c.err = fmt.Errorf("unexpected packet type %d from the broker", pk.FixedHeader.Type)
			return
		}
	}
}

// ping sends PINGREQ at a third of the keepalive until close.
func (c *rawMQTT) ping() {
	defer close(c.pinged)
	t := time.NewTicker(rawMQTTKeepalive / 3)
	defer t.Stop()
	ping := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}, ProtocolVersion: 4}
	for {
		select {
		case <-c.stop:
			return
		case <-c.done:
			return
		case <-t.C:
			_ = c.write(ping.PingreqEncode) // a failed write fails the reader too
		}
	}
}

// close sends DISCONNECT, closes the connection and waits for the reader
// and the pinger (the closed connection ends both).
func (c *rawMQTT) close() {
	disconnect := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ProtocolVersion: 4}
	// A second at most, for this write and for a worker's write stuck on
	// a broker that stopped reading.
	_ = c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_ = c.write(disconnect.DisconnectEncode)
	close(c.stop)
	_ = c.conn.Close()
	c.stopCtx()
	<-c.done
	<-c.pinged
}

// readRawPacket reads one MQTT 3.1.1 packet: the fixed header, the
// remaining length and the body, decoded for the types the requester reads.
// The payload of a PUBLISH is its own slice.
func readRawPacket(r *bufio.Reader) (packets.Packet, error) {
	pk := packets.Packet{ProtocolVersion: 4}
	hb, err := r.ReadByte()
	if err != nil {
		return pk, err
	}
	if err := pk.FixedHeader.Decode(hb); err != nil {
		return pk, err
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		return pk, err
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return pk, err
	}
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Pingresp:
	default:
		err = errors.New("packet type not read by the requester")
	}
	if err != nil {
		return pk, fmt.Errorf("packet type %d: %w", pk.FixedHeader.Type, err)
	}
	return pk, nil
}
