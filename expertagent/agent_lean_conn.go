package expertagent

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// agentReadBufferSize is the read buffer of the Agent's connection: a few
// requests' worth, so that one read syscall picks up every packet that
// arrived together.
const agentReadBufferSize = 16 << 10

// agentAckDelay is how long the PUBACK of a request may wait for the reply
// to that request, so that both leave in one write (see leanConn).
const agentAckDelay = time.Millisecond

// leanCopyLimit is the largest payload a PUBLISH copies into the write
// buffer; a larger one is written from the caller's slice (writev).
const leanCopyLimit = 4 << 10

// leanConn is one network connection of the lean client: one reader (the
// client's run goroutine) behind a read buffer, and writers that take mu and
// write straight to the socket from their own goroutine, one syscall per
// packet.
//
// A request's PUBACK is held for at most ackDelay: the reply to that
// request, written a few microseconds later, takes it along in the same
// write. One write instead of two here, and one read with one wake-up
// instead of two at the broker, per tool call. When the tool takes longer,
// the ack timer writes the held acks alone. Order is kept: held acks always
// go out before whatever is written after them.
type leanConn struct {
	conn net.Conn
	r    *bufio.Reader

	ackDelay time.Duration

	// Activity counters the keepalive compares from one tick to the next.
	reads, writes atomic.Uint64
	pingSent      atomic.Int64 // unix nanoseconds of the PINGREQ not answered yet; 0 = none

	mu       sync.Mutex // serialises writes; guards the fields below
	buf      []byte     // held acks, then the packet being written
	held     int        // bytes of buf that are held acks
	timer    *time.Timer
	armed    bool      // timer runs for the held acks
	deadline time.Time // the socket's write deadline
	err      error     // first write error: the connection is broken
	closed   bool
}

func newLeanConn(conn net.Conn, r *bufio.Reader) *leanConn {
	c := &leanConn{conn: conn, r: r, ackDelay: agentAckDelay, buf: make([]byte, 0, 512)}
	c.timer = time.AfterFunc(time.Hour, c.flushHeld)
	c.timer.Stop()
	return c
}

// read reads the next packet (only the run goroutine reads).
func (c *leanConn) read() (*leanPacket, error) {
	p, err := leanReadPacket(c.r)
	if err == nil {
		c.reads.Add(1)
	}
	return p, err
}

// queueAck holds the PUBACK of id until the next write or ackDelay.
func (c *leanConn) queueAck(id uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.err != nil {
		return
	}
	c.buf = leanAppendAck(c.buf[:c.held], leanPuback<<4, id)
	c.held = len(c.buf)
	if !c.armed {
		c.armed = true
		c.timer.Reset(c.ackDelay)
	}
}

// flushHeld writes the acks that no reply took along.
func (c *leanConn) flushHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	if c.held == 0 || c.closed || c.err != nil {
		return
	}
	c.buf = c.buf[:c.held]
	_ = c.flushLocked(nil)
}

// writePublish writes a PUBLISH (and any held acks before it).
func (c *leanConn) writePublish(topic string, id uint16, qos byte, retain, dup bool, payload []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = leanPublishHeader(c.buf[:c.held], topic, id, qos, retain, dup, len(payload))
	if len(payload) <= leanCopyLimit {
		c.buf = append(c.buf, payload...)
		return c.flushLocked(nil)
	}
	return c.flushLocked(payload)
}

// writePacket writes a packet that append builds (after any held acks).
func (c *leanConn) writePacket(build func([]byte) []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = build(c.buf[:c.held])
	return c.flushLocked(nil)
}

// flushLocked writes buf, then tail if any, and empties buf. Each write is
// bounded: the socket's write deadline is moved forward only when less than
// half of agentOpTimeout is left, so that most writes need no syscall for it.
func (c *leanConn) flushLocked(tail []byte) error {
	defer func() { c.buf, c.held = c.buf[:0], 0 }()
	if c.closed {
		return errLeanConnLost
	}
	if c.err != nil {
		return c.err
	}
	if now := time.Now(); c.deadline.Sub(now) < agentOpTimeout/2 {
		c.deadline = now.Add(agentOpTimeout)
		if err := c.conn.SetWriteDeadline(c.deadline); err != nil {
			c.err = err
			return err
		}
	}
	var err error
	if tail == nil {
		_, err = c.conn.Write(c.buf)
	} else {
		bufs := net.Buffers{c.buf, tail}
		_, err = bufs.WriteTo(c.conn)
	}
	if err != nil {
		// A partial write leaves the stream unusable: the reader sees the
		// socket closed and the client reconnects.
		c.err = err
		_ = c.conn.Close()
		return err
	}
	c.writes.Add(1)
	return nil
}

// close writes the held acks and DISCONNECT when polite, then closes the
// socket. The socket is closed first when not polite, so that a write stuck
// on a dead network (holding mu) is released.
func (c *leanConn) close(polite bool) {
	if polite {
		c.mu.Lock()
		if !c.closed && c.err == nil {
			c.buf = append(c.buf[:c.held], leanDisconnect<<4, 0)
			_ = c.flushLocked(nil)
		}
		c.mu.Unlock()
	}
	_ = c.conn.Close()
	c.mu.Lock()
	c.closed = true
	c.buf, c.held = nil, 0
	c.timer.Stop()
	c.mu.Unlock()
}
