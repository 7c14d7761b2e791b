package expertagent

import (
	"bufio"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/coalesce"
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
// client's run goroutine) behind a read buffer, and writers that write
// straight to the socket from their own goroutine: no writer goroutine.
//
// Writes are combined: a writer appends its packet to buf, then takes wmu
// and writes whatever buf holds by then. While one writer is in its write
// syscall, the packets of others pile up in buf, and the next writer to get
// wmu sends them all in one write; the writers whose packets went along find
// buf empty and return without a syscall. Under load that is one write for
// several replies. While writes have been carrying several publishes, a
// writer also yields once (runtime.Gosched) between its append and its
// write: the workers runnable at that moment append theirs first, so
// replies finished together leave together even when nobody is in a write
// yet. With 32 calls in flight that took the agent from 0.9 writes per
// reply to 0.35, and its write syscalls from 24% of its CPU to 12%
// (docs/benchmarks.md, session 6). One call at a time a yield would cost
// CPU and latency for nothing: a coalesce.Switch turns the yields off then.
//
// A request's PUBACK waits in buf for at most ackDelay: the reply to that
// request, written a few microseconds later, takes it along in the same
// write. One write instead of two here, and one read with one wake-up
// instead of two at the broker, per tool call. When the tool takes longer,
// the ack timer writes the held acks alone. Order is kept: bytes leave in
// the order they were appended.
type leanConn struct {
	conn net.Conn
	r    *bufio.Reader

	ackDelay time.Duration

	// Activity counters the keepalive compares from one tick to the next.
	reads, writes atomic.Uint64
	pingSent      atomic.Int64 // unix nanoseconds of the PINGREQ not answered yet; 0 = none

	wmu      sync.Mutex // held while writing to the socket; taken before mu
	spare    []byte     // buf's other half: the bytes being written (wmu)
	deadline time.Time  // the socket's write deadline (wmu)

	// yield tells writePublish whether to yield before it writes; every
	// flush feeds it the publishes it took.
	yield coalesce.Switch

	mu     sync.Mutex // guards the fields below
	buf    []byte     // packets not written yet, in order
	nPubs  int        // how many PUBLISH packets buf holds
	timer  *time.Timer
	armed  bool  // timer runs for acks in buf
	err    error // first write error: the connection is broken
	closed bool
}

func newLeanConn(conn net.Conn, r *bufio.Reader) *leanConn {
	c := &leanConn{conn: conn, r: r, ackDelay: agentAckDelay, buf: make([]byte, 0, 1024), spare: make([]byte, 0, 1024)}
	c.timer = time.AfterFunc(time.Hour, c.flushHeld)
	c.timer.Stop()
	return c
}

// read reads the next packet (only the run goroutine reads).
func (c *leanConn) read() (leanPacket, error) {
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
	c.buf = leanAppendAck(c.buf, leanPuback<<4, id)
	if !c.armed {
		c.armed = true
		c.timer.Reset(c.ackDelay)
	}
}

// flushHeld writes the acks that no reply took along.
func (c *leanConn) flushHeld() {
	c.mu.Lock()
	c.armed = false
	c.mu.Unlock()
	_ = c.flush(nil, nil)
}

// writePublish writes a PUBLISH.
func (c *leanConn) writePublish(topic string, id uint16, qos byte, retain, dup bool, payload []byte) error {
	if len(payload) > leanCopyLimit {
		// Written from the caller's slice behind its header (writev): the
		// header must be the last thing in buf, so it is appended under wmu.
		return c.flush(func(b []byte) []byte { return leanPublishHeader(b, topic, id, qos, retain, dup, len(payload)) }, payload)
	}
	c.mu.Lock()
	c.buf = append(leanPublishHeader(c.buf, topic, id, qos, retain, dup, len(payload)), payload...)
	c.nPubs++
	c.mu.Unlock()
	if c.yield.Yield() {
		// Let the workers runnable now append their replies: the first of
		// us to take wmu writes them all (see leanConn).
		runtime.Gosched()
	}
	return c.flush(nil, nil)
}

// writePacket writes a packet that build appends.
func (c *leanConn) writePacket(build func([]byte) []byte) error {
	c.mu.Lock()
	c.buf = build(c.buf)
	c.mu.Unlock()
	return c.flush(nil, nil)
}

// flush writes what buf holds (after appending head under wmu, and then
// tail, if given). With nothing to write it returns at once: another
// writer took this one's packet along.
func (c *leanConn) flush(head func([]byte) []byte, tail []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if head != nil {
		c.buf = head(c.buf)
	}
	out, err := c.buf, c.err
	if c.closed {
		err = errLeanConnLost
	}
	c.yield.Wrote(c.nPubs)
	c.buf, c.nPubs = c.spare[:0], 0
	c.mu.Unlock()
	defer func() { c.spare = out[:0] }()
	if err != nil || len(out) == 0 {
		return err
	}
	if err := c.writeLocked(out, tail); err != nil {
		// A partial write leaves the stream unusable: the reader sees the
		// socket closed and the client reconnects.
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
		_ = c.conn.Close()
		return err
	}
	c.writes.Add(1)
	return nil
}

// writeLocked writes b, then tail if any, under wmu. Each write is
// bounded: the socket's write deadline is moved forward only when less
// than half of agentOpTimeout is left, so that most writes need no syscall
// for it.
func (c *leanConn) writeLocked(b, tail []byte) error {
	if now := time.Now(); c.deadline.Sub(now) < agentOpTimeout/2 {
		c.deadline = now.Add(agentOpTimeout)
		if err := c.conn.SetWriteDeadline(c.deadline); err != nil {
			return err
		}
	}
	if tail == nil {
		_, err := c.conn.Write(b)
		return err
	}
	bufs := net.Buffers{b, tail}
	_, err := bufs.WriteTo(c.conn)
	return err
}

// close writes what buf holds and DISCONNECT when polite, then closes the
// socket. It closes the socket first when not polite, so that a write stuck
// on a dead network (holding wmu) is released.
func (c *leanConn) close(polite bool) {
	if polite {
		_ = c.flush(func(b []byte) []byte { return append(b, leanDisconnect<<4, 0) }, nil)
	}
	_ = c.conn.Close()
	c.mu.Lock()
	c.closed = true
	c.buf = nil
	c.timer.Stop()
	c.mu.Unlock()
}
