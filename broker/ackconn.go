package broker

import (
	"net"
	"sync"
)

// ackConn is a client's network connection that holds back the PUBACKs
// mochi writes while the client's read loop is busy, and sends them with
// the next write or when that loop reads from the socket again.
//
// mochi writes the PUBACK of a QoS 1 publish from the client's read loop,
// right after reading the publish, in a syscall of its own: on an expert
// agent's connection, one per tool call, as dear as the request itself. The
// read loop takes in whatever the socket holds at once, so the acks of a
// burst of replies now leave in one write, or ride along with the next
// request. An ack waits only while the read loop works through data it
// already has: one written while the loop waits in Read goes out at once.
//
// Acks are never reordered with the connection's other writes: taking the
// held ones and writing them happen under wmu, which serialises every write.
// A read loop with nothing held never waits for wmu, so a write stuck on a
// peer that does not read cannot stop the loop from reading; one with acks
// to send waits as it did when mochi wrote each ack itself.
type ackConn struct {
	net.Conn

	wmu sync.Mutex // serialises writes to Conn; guards out
	out []byte     // acks being written (a buffer swapped with held)

	mu      sync.Mutex // guards held and reading; never held across I/O
	held    []byte     // PUBACKs not written yet, in order
	reading bool       // the read loop is in Conn.Read: hold nothing
}

// isPuback reports whether b is exactly one PUBACK packet without reason
// code or properties (MQTT 3.1.1, and MQTT 5 success): what mochi writes
// for every QoS 1 publish.
func isPuback(b []byte) bool { return len(b) == 4 && b[0] == 0x40 && b[1] == 2 }

// takeHeld moves the held acks to out. Called with wmu held.
func (c *ackConn) takeHeld() {
	c.mu.Lock()
	c.held, c.out = c.out[:0], c.held
	c.mu.Unlock()
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
	defer c.wmu.Unlock()
	c.takeHeld()
	if len(c.out) == 0 {
		return c.Conn.Write(b)
	}
	bufs := net.Buffers{c.out, b} // one writev
	n, err := bufs.WriteTo(c.Conn)
	return max(int(n)-len(c.out), 0), err
}

// Read sends the held acks, then reads.
func (c *ackConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	held := len(c.held) > 0
	c.reading = !held
	c.mu.Unlock()
	if held {
		c.wmu.Lock()
		c.mu.Lock()
		c.held, c.out = c.out[:0], c.held
		c.reading = true // with the take: an ack from now on goes out at once
		c.mu.Unlock()
		var err error
		if len(c.out) > 0 {
			_, err = c.Conn.Write(c.out)
		}
		c.wmu.Unlock()
		if err != nil {
			c.setReading(false)
			return 0, err
		}
	}
	n, err := c.Conn.Read(b)
	c.setReading(false)
	return n, err
}

func (c *ackConn) setReading(r bool) {
	c.mu.Lock()
	c.reading = r
	c.mu.Unlock()
}
