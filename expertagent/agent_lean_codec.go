package expertagent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The MQTT 3.1.1 packets the lean client (leanClient) writes and reads. It
// needs few of them, all small: a codec of its own appends straight into the
// connection's write buffer and reads from its bufio.Reader, where paho's
// packets package allocates a struct, a bytes.Buffer and a copy per packet.

// MQTT 3.1.1 control packet types (the high nibble of the first byte).
const (
	leanConnect     = 1
	leanConnack     = 2
	leanPublish     = 3
	leanPuback      = 4
	leanPubrec      = 5
	leanPubrel      = 6
	leanPubcomp     = 7
	leanSubscribe   = 8
	leanSuback      = 9
	leanUnsubscribe = 10
	leanUnsuback    = 11
	leanPingreq     = 12
	leanPingresp    = 13
	leanDisconnect  = 14
)

// leanMaxRemaining is the largest remaining length MQTT can encode.
const leanMaxRemaining = 268_435_455

// leanAllocStep bounds what readBody allocates ahead of the bytes it has
// read: a corrupt length cannot make it allocate 256 MiB up front.
const leanAllocStep = 1 << 20

// errLeanProtocol is wrapped by every decoding error: the broker sent
// something MQTT 3.1.1 does not allow, and the connection is dropped.
var errLeanProtocol = errors.New("mqtt protocol error")

// errLeanBrokerDisconnect is the read error when the broker ends the
// connection with a DISCONNECT. MQTT 3.1.1 has no such packet from the
// server, but brokers send it as they shut down (mochi does, and MQTT 5
// defines it): it is a closed connection, not a protocol error.
var errLeanBrokerDisconnect = errors.New("the broker closed the connection (DISCONNECT)")

// leanPacket is one packet read from the broker. Body is the packet's own
// allocation (never reused), so a PUBLISH's Topic and Payload stay valid.
type leanPacket struct {
	kind    byte
	flags   byte // low nibble of the first byte
	id      uint16
	topic   string // PUBLISH
	payload []byte // PUBLISH
	codes   []byte // SUBACK return codes; CONNACK: [session present, return code]
}

func (p *leanPacket) qos() byte { return (p.flags >> 1) & 3 }

// leanAppendLength appends MQTT's variable-length remaining length.
func leanAppendLength(b []byte, n int) []byte {
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

func leanAppendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func leanAppendBytes(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// leanConnectPacket is what CONNECT says.
type leanConnectPacket struct {
	clientID           string
	username, password string
	keepAlive          uint16 // seconds
	willTopic          string // "" = no Will
	willPayload        []byte
	willQoS            byte
	willRetain         bool
}

// leanAppendConnect appends a CONNECT with a clean session.
func leanAppendConnect(b []byte, c *leanConnectPacket) ([]byte, error) {
	for _, s := range []string{c.clientID, c.username, c.password, c.willTopic} {
		if len(s) > 0xFFFF {
			return b, fmt.Errorf("connect: a field of %d bytes, more than MQTT allows", len(s))
		}
	}
	if len(c.willPayload) > 0xFFFF {
		return b, fmt.Errorf("connect: a Will of %d bytes, more than MQTT allows", len(c.willPayload))
	}
	flags := byte(0x02) // clean session
	n := 10 + 2 + len(c.clientID)
	if c.willTopic != "" {
		flags |= 0x04 | c.willQoS<<3
		if c.willRetain {
			flags |= 0x20
		}
		n += 2 + len(c.willTopic) + 2 + len(c.willPayload)
	}
	// As paho: each credential is sent when set.
	if c.username != "" {
		flags |= 0x80
		n += 2 + len(c.username)
	}
	if c.password != "" {
		flags |= 0x40
		n += 2 + len(c.password)
	}
	b = append(b, leanConnect<<4)
	b = leanAppendLength(b, n)
	b = append(b, 0, 4, 'M', 'Q', 'T', 'T', 4, flags)
	b = binary.BigEndian.AppendUint16(b, c.keepAlive)
	b = leanAppendString(b, c.clientID)
	if c.willTopic != "" {
		b = leanAppendString(b, c.willTopic)
		b = leanAppendBytes(b, c.willPayload)
	}
	if c.username != "" {
		b = leanAppendString(b, c.username)
	}
	if c.password != "" {
		b = leanAppendString(b, c.password)
	}
	return b, nil
}

// leanPublishHeader appends a PUBLISH up to its payload; the payload
// follows (appended, or written after it with writev). The caller checks
// the topic's length (leanCheckTopic).
func leanPublishHeader(b []byte, topic string, id uint16, qos byte, retain, dup bool, payloadLen int) []byte {
	first := byte(leanPublish<<4) | qos<<1
	if retain {
		first |= 0x01
	}
	if dup {
		first |= 0x08
	}
	n := 2 + len(topic) + payloadLen
	if qos > 0 {
		n += 2
	}
	b = append(b, first)
	b = leanAppendLength(b, n)
	b = leanAppendString(b, topic)
	if qos > 0 {
		b = binary.BigEndian.AppendUint16(b, id)
	}
	return b
}

// leanCheckPublish reports whether a PUBLISH of topic and payload fits MQTT.
func leanCheckPublish(topic string, payloadLen int) error {
	if topic == "" || len(topic) > 0xFFFF {
		return fmt.Errorf("publish: topic of %d bytes", len(topic))
	}
	if 2+len(topic)+2+payloadLen > leanMaxRemaining {
		return fmt.Errorf("publish: payload of %d bytes, more than MQTT allows", payloadLen)
	}
	return nil
}

// leanAppendAck appends a two-byte-id packet: PUBACK, or another of its shape.
func leanAppendAck(b []byte, first byte, id uint16) []byte {
	return binary.BigEndian.AppendUint16(append(b, first, 2), id)
}

// leanAppendSubscribe appends a SUBSCRIBE of filters, each at qos.
func leanAppendSubscribe(b []byte, id uint16, qos byte, filters []string) []byte {
	n := 2
	for _, f := range filters {
		n += 2 + len(f) + 1
	}
	b = append(b, leanSubscribe<<4|0x02)
	b = leanAppendLength(b, n)
	b = binary.BigEndian.AppendUint16(b, id)
	for _, f := range filters {
		b = append(leanAppendString(b, f), qos)
	}
	return b
}

// leanAppendUnsubscribe appends an UNSUBSCRIBE of filters.
func leanAppendUnsubscribe(b []byte, id uint16, filters []string) []byte {
	n := 2
	for _, f := range filters {
		n += 2 + len(f)
	}
	b = append(b, leanUnsubscribe<<4|0x02)
	b = leanAppendLength(b, n)
	b = binary.BigEndian.AppendUint16(b, id)
	for _, f := range filters {
		b = leanAppendString(b, f)
	}
	return b
}

// leanCheckFilters reports whether filters can go in a SUBSCRIBE.
func leanCheckFilters(filters []string) error {
	if len(filters) == 0 {
		return errors.New("no topic filter")
	}
	n := 2
	for _, f := range filters {
		if f == "" || len(f) > 0xFFFF {
			return fmt.Errorf("topic filter of %d bytes", len(f))
		}
		n += 3 + len(f)
	}
	if n > leanMaxRemaining {
		return errors.New("too many topic filters for one packet")
	}
	return nil
}

// leanReadPacket reads one packet from r. The packet is a value: one per
// message read, it is not worth an allocation.
func leanReadPacket(r *bufio.Reader) (leanPacket, error) {
	first, err := r.ReadByte()
	if err != nil {
		return leanPacket{}, err
	}
	n, err := leanReadLength(r)
	if err != nil {
		return leanPacket{}, err
	}
	p := leanPacket{kind: first >> 4, flags: first & 0x0F}
	switch p.kind {
	case leanPingresp:
		if n != 0 {
			return leanPacket{}, fmt.Errorf("%w: PINGRESP of %d bytes", errLeanProtocol, n)
		}
		return p, nil
	case leanConnack:
		if n != 2 {
			return leanPacket{}, fmt.Errorf("%w: CONNACK of %d bytes", errLeanProtocol, n)
		}
	case leanPuback, leanUnsuback, leanPubrec, leanPubrel, leanPubcomp:
		if n != 2 {
			return leanPacket{}, fmt.Errorf("%w: packet type %d of %d bytes", errLeanProtocol, p.kind, n)
		}
		// Byte by byte: a [2]byte read through io.ReadFull would escape
		// to the heap, on every PUBACK.
		hi, err := r.ReadByte()
		if err != nil {
			return leanPacket{}, leanUnexpectedEOF(err)
		}
		lo, err := r.ReadByte()
		if err != nil {
			return leanPacket{}, leanUnexpectedEOF(err)
		}
		p.id = uint16(hi)<<8 | uint16(lo)
		return p, nil
	case leanPublish, leanSuback:
	case leanDisconnect:
		return leanPacket{}, errLeanBrokerDisconnect
	default:
		return leanPacket{}, fmt.Errorf("%w: unexpected packet type %d from the broker", errLeanProtocol, p.kind)
	}
	body, err := leanReadBody(r, n)
	if err != nil {
		return leanPacket{}, err
	}
	switch p.kind {
	case leanConnack:
		p.codes = body
	case leanSuback:
		if len(body) < 3 {
			return leanPacket{}, fmt.Errorf("%w: SUBACK of %d bytes", errLeanProtocol, n)
		}
		p.id, p.codes = binary.BigEndian.Uint16(body), body[2:]
	case leanPublish:
		if err := p.decodePublish(body); err != nil {
			return leanPacket{}, err
		}
	}
	return p, nil
}

func (p *leanPacket) decodePublish(body []byte) error {
	if len(body) < 2 {
		return fmt.Errorf("%w: PUBLISH of %d bytes", errLeanProtocol, len(body))
	}
	tl := int(binary.BigEndian.Uint16(body))
	rest := body[2:]
	if tl == 0 || tl > len(rest) {
		return fmt.Errorf("%w: PUBLISH topic of %d bytes in %d", errLeanProtocol, tl, len(rest))
	}
	p.topic, rest = string(rest[:tl]), rest[tl:]
	switch p.qos() {
	case 0:
	case 1, 2:
		if len(rest) < 2 {
			return fmt.Errorf("%w: PUBLISH without its packet id", errLeanProtocol)
		}
		p.id, rest = binary.BigEndian.Uint16(rest), rest[2:]
		if p.id == 0 {
			return fmt.Errorf("%w: PUBLISH with packet id 0", errLeanProtocol)
		}
	default:
		return fmt.Errorf("%w: PUBLISH with QoS 3", errLeanProtocol)
	}
	p.payload = rest
	return nil
}

// leanReadLength reads a remaining length (one to four bytes).
func leanReadLength(r *bufio.Reader) (int, error) {
	n, mult := 0, 1
	for range 4 {
		d, err := r.ReadByte()
		if err != nil {
			return 0, leanUnexpectedEOF(err)
		}
		n += int(d&0x7F) * mult
		if d&0x80 == 0 {
			return n, nil
		}
		mult *= 128
	}
	return 0, fmt.Errorf("%w: remaining length longer than 4 bytes", errLeanProtocol)
}

// leanReadBody reads n bytes into a slice of their own, growing it as the
// bytes arrive beyond leanAllocStep.
func leanReadBody(r *bufio.Reader, n int) ([]byte, error) {
	if n <= leanAllocStep {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, leanUnexpectedEOF(err)
		}
		return b, nil
	}
	var buf bytes.Buffer
	buf.Grow(leanAllocStep)
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		return nil, leanUnexpectedEOF(err)
	}
	return buf.Bytes(), nil
}

// leanUnexpectedEOF turns an EOF inside a packet into io.ErrUnexpectedEOF.
func leanUnexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
