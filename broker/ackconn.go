package broker

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/coalesce"
)

// ackConn is a client's network connection that holds back the PUBACKs
// mochi writes while the client's read loop is busy, and sends them with
// the next write or when that loop reads from the socket again; and that
// takes the gateway's requests to an expert agent straight from the
// InlineBus (reqroute.go), without mochi's write queue.
//
// mochi writes the PUBACK of a QoS 1 publish from the client's read loop,
// right after reading the publish, in a syscall of its own: on an expert
// agent's connection, one per tool call, as dear as the request itself. The
// read loop takes in whatever the socket holds at once, so the acks of a
// burst of replies now leave in one write, or ride along with the next
// request. An ack waits only while the read loop works through data it
// already has: one written while the loop waits in Read goes out at once.
//
// A request (writeQueued) is appended to queued and written by whoever
// holds wmu next, its own writer included: a writer never waits for
// another, and requests that arrive during a write leave together in the
// next one. While requests have been leaving several at a time, a writer
// also yields once before it writes, so that the callers runnable at that
// moment queue theirs too (queuedYieldLimit). Every holder of wmu writes
// what is queued before it lets go, and looks again after: nothing queued
// is left behind.
//
// Bytes are never reordered within a packet, and acks never with the
// connection's other writes: taking the held and queued bytes and writing
// them happen under wmu, which serialises every write. A read loop with
// nothing held never waits for wmu, so a write stuck on a peer that does not
// read cannot stop the loop from reading; one with acks to send waits as it
// did when mochi wrote each ack itself.
type ackConn struct {
	net.Conn
	endSignal // the takeover hook's: the connection starts to end

	wmu     sync.Mutex // serialises writes to Conn; guards out and sending
	out     []byte     // acks being written (a buffer swapped with held)
	sending []byte     // queued packets being written (swapped with queued)

	mu      sync.Mutex // guards held, queued, nQueued and reading; never held across I/O
	held    []byte     // PUBACKs not written yet, in order
	queued  []byte     // whole packets from writeQueued not written yet
	nQueued int        // how many packets queued holds
	reading bool       // the read loop is in Conn.Read: hold nothing

	// yield tells writeQueued whether to yield before it writes
	// (queuedYieldLimit); every take of queued packets feeds it.
	yield coalesce.Switch

	// werr is the first failed write. The connection is closed with it:
	// the stream is broken, and nothing is queued or written after it.
	werr atomic.Pointer[writeFailure]

	deadline atomic.Int64 // mochi's last SetDeadline, unix ns (0: none)

	writeTimeout time.Duration // bound of writeBounded; 0 means queuedWriteTimeout
}

// queuedWriteTimeout bounds a write of queued packets when mochi's deadline
// (its client's keepalive times 1.5) is later or unset. A write waits only
// when the peer's socket buffer is full: an agent that has not read for
// that long is stuck, and its connection is closed.
const queuedWriteTimeout = 10 * time.Second

// isPuback reports whether b is exactly one PUBACK packet without reason
// code or properties (MQTT 3.1.1, and MQTT 5 success): what mochi writes
// for every QoS 1 publish.
func isPuback(b []byte) bool { return len(b) == 4 && b[0] == 0x40 && b[1] == 2 }

// takeLocked moves the held acks to out and the queued packets to sending,
// and returns how many of writeQueued's packets sending holds. Called with
// wmu held.
func (c *ackConn) takeLocked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held, c.out = c.out[:0], c.held
	c.queued, c.sending = c.sending[:0], c.queued
	n := c.nQueued
	c.nQueued = 0
	return n
}

type writeFailure struct{ err error }

// failed notes the first failed write, closes the connection (a partial
// write leaves the stream unusable; mochi's own write loop only logs its
// errors) and returns err. Callers whose requests were waiting in the
// queue hear of it from writeQueuedNow; later ones from writeQueued.
func (c *ackConn) failed(err error) error {
	c.werr.CompareAndSwap(nil, &writeFailure{err})
	_ = c.Conn.Close()
	return err
}

// broken is the first failed write, if any.
func (c *ackConn) broken() error {
	if f := c.werr.Load(); f != nil {
		return f.err
	}
	return nil
}

func (c *ackConn) Write(b []byte) (int, error) {
	if isPuback(b) {
		c.mu.Lock()
		if !c.reading {
			c.held = append(c.held, b...)
			c.mu.Unlock()
			return len(b), nil
		}
		c.mu.Unlock()
	}
	c.wmu.Lock()
	c.yield.Wrote(c.takeLocked())
	var n int
	var err error
	if len(c.out) == 0 && len(c.sending) == 0 {
		n, err = c.Conn.Write(b)
	} else {
		// One writev; queued packets ahead of b, so that a goroutine that
		// queued one and then writes another keeps its order. Queued
		// requests keep their bound when they leave with mochi's write.
		bufs := net.Buffers{c.out, c.sending, b}
		var w int64
		if len(c.sending) > 0 {
			w, err = c.writeBounded(bufs)
		} else {
			w, err = bufs.WriteTo(c.Conn)
		}
		n = min(max(int(w)-len(c.out)-len(c.sending), 0), len(b))
	}
	c.wmu.Unlock()
	if err != nil {
		return n, c.failed(err)
	}
	c.writeQueuedNow()
	return n, nil
}

// queuedYieldLimit is the largest request body writeQueued may queue and
// yield for before it writes (while its coalesce.Switch says so); a
// larger one is written in place at once. Measured with 32 callers on 2
// cores: the gateway's writes per call fell from 2.2 to
// 1.55 (one of them is the HTTP response) and the agent's reads from 0.8 to
// 0.48; with the agent's own writes combined the same way (expertagent's
// leanConn) calls/s rose by ×1.05–1.09 per round (docs/benchmarks.md,
// session 6). One call at a time, a yield had cost CPU and 0.1 ms of p50;
// the switch keeps the yields off then.
const queuedYieldLimit = 4 << 10

// writeQueued queues one or more whole packets (head, then body) and writes
// them unless another writer holds the connection, which then writes them
// before it lets go. It never waits for another writer. A failed write
// closes the connection (the stream is broken): the client reconnects.
func (c *ackConn) writeQueued(head, body []byte) error {
	if err := c.broken(); err != nil {
		return err
	}
	if len(body) <= queuedYieldLimit && c.yield.Yield() {
		c.queue(head, body)
		// Let the goroutines runnable now queue theirs first: the first
		// of us back writes them all (see queuedYieldLimit).
		runtime.Gosched()
		return c.writeQueuedNow()
	}
	if c.wmu.TryLock() {
		// Nobody writes: out at once, with what was queued before it (head
		// joins sending, which is ours under wmu; body is written in place).
		c.yield.Wrote(c.takeLocked() + 1) // what was queued, and this one
		c.sending = append(c.sending, head...)
		_, err := c.writeBounded(net.Buffers{c.out, c.sending, body})
		c.wmu.Unlock()
		if err != nil {
			return c.failed(err)
		}
		return c.writeQueuedNow()
	}
	c.queue(head, body)
	return c.writeQueuedNow()
}

func (c *ackConn) queue(head, body []byte) {
	c.mu.Lock()
	c.queued = append(append(c.queued, head...), body...)
	c.nQueued++
	c.mu.Unlock()
}

// writeQueuedNow writes what is queued while no one else holds wmu. A
// caller whose packets it hands to another writer hears of a failure only
// if that came first.
func (c *ackConn) writeQueuedNow() error {
	for {
		if err := c.broken(); err != nil {
			return err
		}
		c.mu.Lock()
		n := len(c.queued)
		c.mu.Unlock()
		if n == 0 || !c.wmu.TryLock() {
			return nil // the holder of wmu writes it
		}
		c.yield.Wrote(c.takeLocked())
		_, err := c.writeBounded(net.Buffers{c.out, c.sending})
		c.wmu.Unlock()
		if err != nil {
			return c.failed(err)
		}
	}
}

// writeBounded writes bufs under wmu within mochi's deadline, or
// queuedWriteTimeout if that comes first.
func (c *ackConn) writeBounded(bufs net.Buffers) (int64, error) {
	timeout := c.writeTimeout
	if timeout == 0 {
		timeout = queuedWriteTimeout
	}
	limit := time.Now().Add(timeout)
	if ns := c.deadline.Load(); ns == 0 || ns > limit.UnixNano() {
		if err := c.Conn.SetWriteDeadline(limit); err != nil {
			return 0, err
		}
		defer c.restoreWriteDeadline()
	}
	return bufs.WriteTo(c.Conn)
}

// restoreWriteDeadline puts mochi's latest deadline back. mochi may move it
// (SetDeadline, from its read loop) while this runs: it sets it again until
// the value it set is still the latest, so that an older one never stays.
func (c *ackConn) restoreWriteDeadline() {
	for {
		ns := c.deadline.Load()
		var t time.Time
		if ns != 0 {
			t = time.Unix(0, ns)
		}
		_ = c.Conn.SetWriteDeadline(t)
		if c.deadline.Load() == ns {
			return
		}
	}
}

// Read sends the held acks (and anything queued), then reads.
func (c *ackConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	held := len(c.held) > 0
	c.reading = !held
	c.mu.Unlock()
	if held {
		c.wmu.Lock()
		c.yield.Wrote(c.takeLocked())
		c.mu.Lock()
		c.reading = true // with the take: an ack from now on goes out at once
		c.mu.Unlock()
		var err error
		switch {
		case len(c.sending) > 0: // queued requests keep their bound
			_, err = c.writeBounded(net.Buffers{c.out, c.sending})
		case len(c.out) > 0:
			_, err = c.Conn.Write(c.out)
		}
		c.wmu.Unlock()
		if err != nil {
			err = c.failed(err)
		} else {
			err = c.writeQueuedNow()
		}
		if err != nil {
			c.setReading(false)
			c.end()
			return 0, err
		}
	}
	n, err := c.Conn.Read(b)
	c.setReading(false)
	if err != nil {
		c.end()
	}
	return n, err
}

// Close tells the takeover hook of the end before anything else: mochi's
// Stop closes the connection before it cancels the context that its read
// loop checks, so the hook hears of it before the loop can end and rewrite
// the client's Will.
func (c *ackConn) Close() error {
	c.end()
	return c.Conn.Close()
}

func (c *ackConn) setReading(r bool) {
	c.mu.Lock()
	c.reading = r
	c.mu.Unlock()
}

// SetDeadline notes mochi's deadline (it sets one per packet read, from the
// client's keepalive), which writeBounded puts back after a write of its
// own.
func (c *ackConn) SetDeadline(t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	c.deadline.Store(ns)
	return c.Conn.SetDeadline(t)
}
