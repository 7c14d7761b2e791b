package broker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/coalesce"
)

// ackWait bounds every wait of these tests.
const ackWait = 10 * time.Second

// tcpPair returns both ends of a real loopback TCP connection, the server
// end wrapped in an ackConn.
func tcpPair(t *testing.T) (*ackConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := net.DialTimeout("tcp", ln.Addr().String(), ackWait)
	if err != nil {
		t.Fatal(err)
	}
	var server net.Conn
	select {
	case server = <-accepted:
	case <-time.After(ackWait):
		t.Fatal("no connection accepted")
	}
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
	})
	return &ackConn{Conn: server}, client
}

// writeCounter counts the writes that reach a connection.
type writeCounter struct {
	net.Conn
	writes atomic.Int64
}

func (c *writeCounter) Write(b []byte) (int, error) {
	if len(b) > 0 { // net.Buffers.WriteTo writes each buffer, empty ones too
		c.writes.Add(1)
	}
	return c.Conn.Write(b)
}

// readExactly reads len(want) bytes from c within ackWait and compares.
func readExactly(t *testing.T, c net.Conn, want []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(ackWait))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading %x: %v", want, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %x, want %x", got, want)
	}
}

// nothingToRead fails if c has bytes waiting.
func nothingToRead(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var b [1]byte
	if n, err := c.Read(b[:]); n > 0 {
		t.Fatalf("unexpected byte %x", b[:n])
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read: %v", err)
	}
}

func TestAckConn(t *testing.T) {
	ack1 := []byte{0x40, 2, 0, 1}
	ack2 := []byte{0x40, 2, 0, 2}
	publish := []byte{0x30, 5, 0, 1, 'a', 'h', 'i'}

	t.Run("held until the next read", func(t *testing.T) {
		srv, cl := tcpPair(t)
		for _, a := range [][]byte{ack1, ack2} {
			if n, err := srv.Write(a); n != len(a) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		nothingToRead(t, cl)
		if _, err := cl.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		_ = srv.SetReadDeadline(time.Now().Add(ackWait))
		if _, err := srv.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		readExactly(t, cl, append(append([]byte{}, ack1...), ack2...))
	})

	t.Run("sent ahead of the next write", func(t *testing.T) {
		srv, cl := tcpPair(t)
		if _, err := srv.Write(ack1); err != nil {
			t.Fatal(err)
		}
		if n, err := srv.Write(publish); n != len(publish) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		readExactly(t, cl, append(append([]byte{}, ack1...), publish...))
		if _, err := srv.Write(publish); err != nil { // nothing held any more
			t.Fatal(err)
		}
		readExactly(t, cl, publish)
	})

	t.Run("not held while the read loop waits", func(t *testing.T) {
		srv, cl := tcpPair(t)
		readDone := make(chan error, 1)
		go func() {
			var b [1]byte
			_ = srv.SetReadDeadline(time.Now().Add(ackWait))
			_, err := srv.Read(b[:])
			readDone <- err
		}()
		for deadline := time.Now().Add(ackWait); ; time.Sleep(time.Millisecond) {
			srv.mu.Lock()
			reading := srv.reading
			srv.mu.Unlock()
			if reading {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the read loop never waited in Read")
			}
		}
		if _, err := srv.Write(ack1); err != nil {
			t.Fatal(err)
		}
		readExactly(t, cl, ack1)
		if _, err := cl.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := <-readDone; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a stuck write does not stop reading", func(t *testing.T) {
		srv, cl := tcpPair(t)
		writeDone := make(chan struct{})
		go func() {
			defer close(writeDone)
			_, _ = srv.Write(make([]byte, 64<<20)) // the peer reads none of it
		}()
		if _, err := cl.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		read := make(chan error, 1)
		go func() {
			var b [1]byte
			_ = srv.SetReadDeadline(time.Now().Add(ackWait))
			_, err := srv.Read(b[:])
			read <- err
		}()
		select {
		case err := <-read:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(ackWait):
			t.Fatal("Read waited for the stuck write")
		}
		_ = cl.Close() // ends the write
		select {
		case <-writeDone:
		case <-time.After(ackWait):
			t.Fatal("write not ended by the peer's close")
		}
	})

	t.Run("other packets are not held", func(t *testing.T) {
		srv, cl := tcpPair(t)
		for _, p := range [][]byte{{0x40, 3, 0, 1, 0x10}, {0x50, 2, 0, 1}, {0xd0, 0}} {
			if _, err := srv.Write(p); err != nil {
				t.Fatal(err)
			}
			readExactly(t, cl, p)
		}
	})
}

// readPackets reads n packets of the form {0x30, len, payload...} (len <
// 128) from c and returns their payloads in arrival order.
func readPackets(t *testing.T, c net.Conn, n int) []string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(ackWait))
	var got []string
	var hdr [2]byte
	for range n {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			t.Fatalf("after %d packets: %v", len(got), err)
		}
		if hdr[0] != 0x30 {
			t.Fatalf("after %d packets: byte %#x where a packet starts: packets interleaved", len(got), hdr[0])
		}
		body := make([]byte, hdr[1])
		if _, err := io.ReadFull(c, body); err != nil {
			t.Fatal(err)
		}
		got = append(got, string(body))
	}
	return got
}

func TestAckConnWriteQueued(t *testing.T) {
	t.Run("concurrent writers: every packet whole, once", func(t *testing.T) {
		srv, cl := tcpPair(t)
		const writers, each = 8, 200
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					body := fmt.Sprintf("w%d-%03d", w, i)
					var err error
					if i%4 == 0 { // mochi's own writes go along
						_, err = srv.Write(append([]byte{0x30, byte(len(body))}, body...))
					} else {
						err = srv.writeQueued([]byte{0x30, byte(len(body))}, []byte(body))
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		got := readPackets(t, cl, writers*each)
		wg.Wait()
		last := map[string]int{}
		for _, p := range got {
			var w, i int
			if _, err := fmt.Sscanf(p, "w%d-%d", &w, &i); err != nil {
				t.Fatalf("packet %q: %v", p, err)
			}
			if prev, ok := last[fmt.Sprint(w)]; ok && i <= prev {
				t.Fatalf("writer %d: packet %d after %d", w, i, prev)
			}
			last[fmt.Sprint(w)] = i
		}
		nothingToRead(t, cl)
	})

	t.Run("writers runnable together share a write", func(t *testing.T) {
		// On one P the writers woken together run one after the other:
		// each queues its request and yields, and the first one back
		// writes them all. Without the yield each writes its own. The
		// yields start off here, as after a quiet spell: on one P only
		// the probe can turn them back on.
		prev := runtime.GOMAXPROCS(1)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
		srv, cl := tcpPair(t)
		counted := &writeCounter{Conn: srv.Conn}
		srv.Conn = counted
		for range coalesce.Off { // off, as after a quiet spell
			srv.yield.Wrote(1)
		}
		const writers = 15 // 15: the probe (one write in 64) must not always fall on a round's last writer
		sent := 0
		round := func() {
			start := make(chan struct{})
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					<-start
					body := fmt.Sprintf("r%03dw%02d", sent/writers, w)
					if err := srv.writeQueued([]byte{0x30, byte(len(body))}, []byte(body)); err != nil {
						t.Error(err)
					}
				})
			}
			close(start)
			wg.Wait()
			sent += writers
		}
		for range 16 {
			if round(); srv.yield.Yield() {
				break
			}
		}
		if !srv.yield.Yield() {
			t.Fatalf("the yields never came back on in %d writes", sent)
		}
		// On: count the writes of a few more rounds. Without the yields
		// each request makes two counted writes (head and body leave as
		// two buffers through the counter); a batch makes one.
		counted.writes.Store(0)
		const rounds = 4
		for range rounds {
			round()
		}
		if n := counted.writes.Load(); n > writers*rounds/2 {
			t.Errorf("%d requests from writers woken %d at a time made %d counted writes, want at most %d", writers*rounds, writers, n, writers*rounds/2)
		}
		if p := readPackets(t, cl, sent); len(p) != sent { // a few KiB: the socket holds them
			t.Fatalf("read %d packets, want %d", len(p), sent)
		}
		nothingToRead(t, cl)
	})

	t.Run("yields only while writes carry several", func(t *testing.T) {
		srv, cl := tcpPair(t)
		for i := range coalesce.Off {
			if !srv.yield.Yield() {
				t.Fatalf("not yielding after %d writes of one packet, want %d", i, coalesce.Off)
			}
			if err := srv.writeQueued([]byte{0x30, 1}, []byte("a")); err != nil {
				t.Fatal(err)
			}
			readExactly(t, cl, []byte{0x30, 1, 'a'})
		}
		if srv.yield.Yield() {
			t.Fatalf("still yielding after %d writes of one packet", coalesce.Off)
		}
		// While off, one write in coalesce.Probe yields all the same.
		probes := 0
		for range 2 * coalesce.Probe {
			if srv.yield.Yield() {
				probes++
			}
			if err := srv.writeQueued([]byte{0x30, 1}, []byte("a")); err != nil {
				t.Fatal(err)
			}
			readExactly(t, cl, []byte{0x30, 1, 'a'})
		}
		if probes != 2 {
			t.Fatalf("%d of %d writes of one packet yielded while off, want 2", probes, 2*coalesce.Probe)
		}
		// Two requests that meet (queued while a write holds the
		// connection) leave together and turn the yields on.
		srv.wmu.Lock()
		for _, b := range []string{"b", "c"} {
			if err := srv.writeQueued([]byte{0x30, 1}, []byte(b)); err != nil {
				t.Fatal(err)
			}
		}
		srv.wmu.Unlock()
		if err := srv.writeQueuedNow(); err != nil {
			t.Fatal(err)
		}
		readExactly(t, cl, []byte{0x30, 1, 'b', 0x30, 1, 'c'})
		if !srv.yield.Yield() {
			t.Fatal("not yielding after a write of two packets")
		}
	})

	t.Run("a caller whose request another writer took hears of its failure", func(t *testing.T) {
		srv, cl := tcpPair(t)
		srv.wmu.Lock()
		if err := srv.writeQueued([]byte{0x30, 1}, []byte("a")); err != nil {
			t.Fatal(err) // queued: the holder of wmu writes it
		}
		_ = cl.Close()
		_ = srv.Conn.Close() // the holder's write fails
		_, err := srv.writeBounded(net.Buffers{[]byte{0x30, 1, 'x'}})
		srv.wmu.Unlock()
		if err == nil {
			t.Fatal("a write on a closed connection succeeded")
		}
		_ = srv.failed(err)
		if err := srv.writeQueued([]byte{0x30, 1}, []byte("b")); err == nil {
			t.Fatal("writeQueued on a broken stream reported no error")
		}
	})

	// stuckWrite starts a write the peer never reads and returns once it
	// holds the connection, with the channel of its result.
	stuckWrite := func(t *testing.T, srv *ackConn) <-chan error {
		t.Helper()
		stuck := make(chan error, 1)
		go func() { stuck <- srv.writeQueued([]byte{0x30, 0}, make([]byte, 64<<20)) }()
		for deadline := time.Now().Add(ackWait); srv.wmu.TryLock(); time.Sleep(time.Millisecond) {
			srv.wmu.Unlock()
			if time.Now().After(deadline) {
				t.Fatal("the big write never held the connection")
			}
		}
		return stuck
	}

	t.Run("never waits for a stuck writer", func(t *testing.T) {
		srv, cl := tcpPair(t)
		srv.writeTimeout = time.Hour // it would end only when the peer closes
		stuck := stuckWrite(t, srv)
		queued := make(chan error, 1)
		go func() {
			for range 100 {
				if err := srv.writeQueued([]byte{0x30, 2}, []byte("hi")); err != nil {
					queued <- err
					return
				}
			}
			queued <- nil
		}()
		select {
		case err := <-queued:
			if err != nil {
				t.Fatalf("queued behind a stuck write: %v", err)
			}
		case <-time.After(ackWait):
			t.Fatal("writeQueued waited for the stuck write")
		}
		_ = cl.Close() // ends the stuck write
		select {
		case err := <-stuck:
			if err == nil {
				t.Fatal("the stuck write succeeded with its peer gone")
			}
		case <-time.After(ackWait):
			t.Fatal("the stuck write outlived its peer")
		}
	})

	t.Run("a stuck write gives up and closes", func(t *testing.T) {
		srv, cl := tcpPair(t)
		srv.writeTimeout = 300 * time.Millisecond
		stuck := stuckWrite(t, srv)
		select {
		case err := <-stuck:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("stuck write ended with %v, want a timeout", err)
			}
		case <-time.After(ackWait):
			t.Fatal("stuck write never gave up")
		}
		_ = cl.SetReadDeadline(time.Now().Add(ackWait))
		if _, err := io.Copy(io.Discard, cl); err != nil {
			t.Fatalf("reading to the close: %v", err)
		}
	})

	t.Run("mochi's deadline is put back", func(t *testing.T) {
		srv, cl := tcpPair(t)
		mochi := time.Now().Add(time.Hour)
		if err := srv.SetDeadline(mochi); err != nil {
			t.Fatal(err)
		}
		if err := srv.writeQueued([]byte{0x30, 1}, []byte("x")); err != nil {
			t.Fatal(err)
		}
		readExactly(t, cl, []byte{0x30, 1, 'x'})
		if got := time.Unix(0, srv.deadline.Load()); !got.Equal(mochi) {
			t.Errorf("deadline noted %v, want %v", got, mochi)
		}
	})
}
