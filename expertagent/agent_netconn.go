package expertagent

import (
	"bufio"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// agentReadBufferSize is the read buffer of the Agent's TCP connection: a
// few requests' worth, so that one read syscall picks up every packet that
// arrived together.
const agentReadBufferSize = 16 << 10

// agentAckDelay is how long the PUBACK of a request may wait for the reply
// to that request, so that both leave in one write (see agentConn).
const agentAckDelay = time.Millisecond

// agentOpenConnection returns paho's connection function for brokerURL if
// the Agent can open that connection itself, nil to leave it to paho.
//
// paho reads every packet straight from the socket, the fixed header one
// byte at a time: four read syscalls for a request, three for each PUBACK,
// a quarter of the agent's CPU under load. Over plain TCP the Agent
// therefore dials itself, as paho would, and hands paho the connection
// behind a read buffer. TLS and WebSocket connections read from buffers of
// their own already; with a proxy configured (ALL_PROXY, which paho
// honours) paho dials too.
func agentOpenConnection(brokerURL string) mqtt.OpenConnectionFunc {
	u, err := url.Parse(brokerURL)
	if err != nil || (u.Scheme != "tcp" && u.Scheme != "mqtt") {
		return nil
	}
	if os.Getenv("ALL_PROXY") != "" || os.Getenv("all_proxy") != "" {
		return nil
	}
	return func(uri *url.URL, o mqtt.ClientOptions) (net.Conn, error) {
		d := o.Dialer
		if d == nil { // paho's own fallback
			d = &net.Dialer{Timeout: 30 * time.Second}
		}
		conn, err := d.Dial("tcp", uri.Host)
		if err != nil {
			return nil, err
		}
		return newAgentConn(conn), nil
	}
}

// agentConn is the Agent's TCP connection to the broker: reads go through a
// buffer, and PUBACKs wait a little for the next write.
//
// paho acknowledges a request (QoS 1) as soon as the Agent has queued it,
// in a write of its own, and the reply follows a few microseconds later in
// another: two syscalls here and two reads with a wake-up each at the
// broker, per tool call. Held back for at most agentAckDelay, the PUBACK
// leaves in the same write as the reply (one writev), or alone when the
// delay runs out because the tool takes longer. Order is kept: a held ack
// always goes out before whatever is written after it.
//
// Only paho's one reader goroutine reads (first the CONNACK, then every
// packet), so the read buffer needs no lock. Writes come from paho's one
// writer goroutine and from the ack timer, serialised by mu. paho sets a
// write deadline around each of its writes and clears it after; the timer's
// write sets its own and then puts paho's back.
type agentConn struct {
	net.Conn
	r *bufio.Reader

	ackDelay time.Duration // agentAckDelay; tests hold acks longer

	mu       sync.Mutex // serialises writes; guards the fields below
	held     []byte     // PUBACKs not written yet, in order
	timer    *time.Timer
	armed    bool      // timer runs for the held acks
	deadline time.Time // the write deadline paho set last
	closed   bool
}

func newAgentConn(conn net.Conn) *agentConn {
	c := &agentConn{Conn: conn, r: bufio.NewReaderSize(conn, agentReadBufferSize), ackDelay: agentAckDelay}
	c.timer = time.AfterFunc(time.Hour, c.flushHeld)
	c.timer.Stop()
	return c
}

func (c *agentConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// isPuback reports whether b is exactly one MQTT 3.1.1 PUBACK packet, as
// paho writes it.
func isPuback(b []byte) bool { return len(b) == 4 && b[0] == 0x40 && b[1] == 2 }

func (c *agentConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if isPuback(b) && !c.closed {
		c.held = append(c.held, b...)
		if !c.armed {
			c.armed = true
			c.timer.Reset(c.ackDelay)
		}
		return len(b), nil
	}
	if len(c.held) == 0 {
		return c.Conn.Write(b)
	}
	bufs := net.Buffers{c.held, b} // one writev
	n, err := bufs.WriteTo(c.Conn)
	n -= int64(len(c.held))
	c.held = c.held[:0]
	return max(int(n), 0), err
}

// flushHeld writes the acks that no reply took along. A failed write is
// left to paho's reader to notice: the connection is broken either way.
func (c *agentConn) flushHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	if len(c.held) == 0 || c.closed {
		return
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(agentOpTimeout))
	_, _ = c.Conn.Write(c.held)
	_ = c.Conn.SetWriteDeadline(c.deadline)
	c.held = c.held[:0]
}

func (c *agentConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *agentConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// Close drops acks still held: the broker sends those requests again on
// the next connection if the session persists, as for any unacknowledged
// QoS 1 message. It closes the socket before taking mu, because paho
// closes the connection to abort a write that is stuck (holding mu).
func (c *agentConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	c.closed = true
	c.held = nil
	c.timer.Stop()
	c.mu.Unlock()
	return err
}
