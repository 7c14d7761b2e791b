package expertagent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/coalesce"
)

// These tests put the lean client in front of a scripted broker on a real
// socket, read with paho's packet codec: they cover what a real broker
// cannot be made to do on cue (refuse a login with each code, refuse a
// subscription, ignore a PINGREQ, drop the connection before a PUBACK).
// The agent tests cover the client against the real broker.

const leanWait = 10 * time.Second

func TestAgentLeanURL(t *testing.T) {
	tests := []struct {
		url, proxy string
		want       bool
	}{
		{url: "tcp://127.0.0.1:1883", want: true},
		{url: "mqtt://broker:1883", want: true},
		{url: "ssl://broker:8883", want: true},
		{url: "tls://broker:8883", want: true},
		{url: "mqtts://broker", want: true},
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
			if _, got := agentLeanURL(tc.url); got != tc.want {
				t.Errorf("agentLeanURL(%q) with ALL_PROXY=%q = %v, want %v", tc.url, tc.proxy, got, tc.want)
			}
		})
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

func writePacket(t *testing.T, w io.Writer, p packets.ControlPacket) {
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

func readPacket(t *testing.T, c net.Conn) packets.ControlPacket {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(leanWait))
	p, err := packets.ReadPacket(c)
	if err != nil {
		t.Fatalf("read a packet: %v", err)
	}
	return p
}

// TestLeanConnReadsPackets: packets that arrive in one segment are read one
// by one through the buffer, and a PUBLISH larger than the buffer arrives
// whole.
func TestLeanConnReadsPackets(t *testing.T) {
	raw, peer := tcpPair(t)
	var burst bytes.Buffer
	for id := uint16(1); id <= 3; id++ {
		writePacket(t, &burst, puback(id))
	}
	pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	pub.Qos, pub.MessageID = 1, 9
	pub.TopicName, pub.Payload = "ff/v1/mcp/p/u/s/_/_/req", bytes.Repeat([]byte("x"), 3*agentReadBufferSize)
	writePacket(t, &burst, pub)
	if _, err := peer.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	c := newLeanConn(raw, bufio.NewReaderSize(raw, agentReadBufferSize))
	t.Cleanup(func() { c.close(false) })
	_ = raw.SetReadDeadline(time.Now().Add(leanWait))
	for id := uint16(1); id <= 3; id++ {
		p, err := c.read()
		if err != nil {
			t.Fatal(err)
		}
		if p.kind != leanPuback || p.id != id {
			t.Fatalf("packet %+v, want PUBACK %d", p, id)
		}
	}
	p, err := c.read()
	if err != nil {
		t.Fatal(err)
	}
	if p.kind != leanPublish || p.qos() != 1 || p.id != 9 || p.topic != pub.TopicName || !bytes.Equal(p.payload, pub.Payload) {
		t.Fatalf("packet %v %d %q (%d bytes), want the PUBLISH", p.kind, p.id, p.topic, len(p.payload))
	}
}

// TestLeanConnAckRidesWithReply: a PUBACK is held until the next write
// and then leaves before it; nothing is on the wire while it is held.
func TestLeanConnAckRidesWithReply(t *testing.T) {
	for _, size := range []int{7, 2 * leanCopyLimit} { // copied, and written with writev
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			raw, peer := tcpPair(t)
			c := newLeanConn(raw, bufio.NewReader(raw))
			c.ackDelay = time.Hour // only the reply may carry the acks out
			t.Cleanup(func() { c.close(false) })

			c.queueAck(7)
			c.queueAck(8)
			_ = peer.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if n, err := peer.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Fatalf("read %d bytes (%v) while the acks are held, want a timeout", n, err)
			}
			payload := bytes.Repeat([]byte("y"), size)
			if err := c.writePublish("ff/v1/mcp/p/u/s/_/_/res", 3, 1, false, false, payload); err != nil {
				t.Fatal(err)
			}
			for _, id := range []uint16{7, 8} {
				if ack, ok := readPacket(t, peer).(*packets.PubackPacket); !ok || ack.MessageID != id {
					t.Fatalf("packet %v, want PUBACK %d", ack, id)
				}
			}
			got, ok := readPacket(t, peer).(*packets.PublishPacket)
			if !ok || got.MessageID != 3 || got.Qos != 1 || got.Dup || got.Retain || !bytes.Equal(got.Payload, payload) {
				t.Fatalf("packet %v, want the PUBLISH", got)
			}
		})
	}
}

// TestLeanConnAckAloneAfterDelay: with no reply to ride along with, a held
// PUBACK still leaves once the delay runs out; an abrupt close drops what
// is held, a polite one sends it before DISCONNECT.
func TestLeanConnAckAloneAfterDelay(t *testing.T) {
	raw, peer := tcpPair(t)
	c := newLeanConn(raw, bufio.NewReader(raw))
	c.queueAck(42)
	if ack, ok := readPacket(t, peer).(*packets.PubackPacket); !ok || ack.MessageID != 42 {
		t.Fatalf("packet %v, want PUBACK 42", ack)
	}
	c.ackDelay = time.Hour
	c.queueAck(43)
	c.close(false)
	_ = peer.SetReadDeadline(time.Now().Add(leanWait))
	if _, err := packets.ReadPacket(peer); err == nil {
		t.Fatal("read a packet after an abrupt close, want EOF: the held ack is dropped")
	}

	raw, peer = tcpPair(t)
	c = newLeanConn(raw, bufio.NewReader(raw))
	c.ackDelay = time.Hour
	c.queueAck(44)
	c.close(true)
	if ack, ok := readPacket(t, peer).(*packets.PubackPacket); !ok || ack.MessageID != 44 {
		t.Fatalf("packet %v, want PUBACK 44", ack)
	}
	if _, ok := readPacket(t, peer).(*packets.DisconnectPacket); !ok {
		t.Fatal("want DISCONNECT after the held ack")
	}
}

// leanPeer is a scripted broker: each accepted connection goes to conns.
type leanPeer struct {
	ln    net.Listener
	conns chan net.Conn
}

func startLeanPeer(t *testing.T) *leanPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &leanPeer{ln: ln, conns: make(chan net.Conn, 8)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(p.conns)
		for c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

// accept takes the next connection and reads its CONNECT.
func (p *leanPeer) accept(t *testing.T) (net.Conn, *packets.ConnectPacket) {
	t.Helper()
	select {
	case c := <-p.conns:
		t.Cleanup(func() { _ = c.Close() })
		cp, ok := readPacket(t, c).(*packets.ConnectPacket)
		if !ok {
			t.Fatal("first packet is not CONNECT")
		}
		return c, cp
	case <-time.After(leanWait):
		t.Fatal("the client did not connect")
		return nil, nil
	}
}

func connack(t *testing.T, c net.Conn, rc byte) {
	t.Helper()
	ack := packets.NewControlPacket(packets.Connack).(*packets.ConnackPacket)
	ack.ReturnCode = rc
	writePacket(t, c, ack)
}

// leanEvents records what the client tells its owner.
type leanEvents struct {
	connects atomic.Int32
	lost     chan error
	msgs     chan [2]string
}

func newLeanTestClient(t *testing.T, p *leanPeer, mod func(*leanOptions)) (*leanClient, *leanEvents) {
	t.Helper()
	ev := &leanEvents{lost: make(chan error, 8), msgs: make(chan [2]string, 8)}
	u, _ := url.Parse("tcp://" + p.ln.Addr().String())
	o := leanOptions{
		url: u, clientID: "lean-1", username: "agent", password: "pw",
		will:      leanWill{topic: PresenceTopic("lean-1"), payload: []byte(`{"status":"offline"}`), qos: 1, retain: true},
		keepAlive: 30 * time.Second, connectTimeout: leanWait, maxBackoff: 50 * time.Millisecond,
		onMessage: func(topic string, payload []byte) { ev.msgs <- [2]string{topic, string(payload)} },
		onConnect: func() { ev.connects.Add(1) },
		onLost:    func(err error) { ev.lost <- err },
	}
	if mod != nil {
		mod(&o)
	}
	l := logrus.New()
	l.Out = io.Discard
	c := newLeanClient(o, logrus.NewEntry(l))
	t.Cleanup(c.close)
	return c, ev
}

// connectLean connects c to p and returns the broker's end.
func connectLean(t *testing.T, c *leanClient, p *leanPeer) net.Conn {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- c.connect(context.Background()) }()
	conn, _ := p.accept(t)
	connack(t, conn, 0)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return conn
}

func TestLeanClientConnect(t *testing.T) {
	p := startLeanPeer(t)
	c, ev := newLeanTestClient(t, p, nil)
	errc := make(chan error, 1)
	go func() { errc <- c.connect(context.Background()) }()
	conn, cp := p.accept(t)
	if cp.ProtocolName != "MQTT" || cp.ProtocolVersion != 4 || !cp.CleanSession || cp.ClientIdentifier != "lean-1" ||
		!cp.UsernameFlag || cp.Username != "agent" || !cp.PasswordFlag || string(cp.Password) != "pw" || cp.Keepalive != 30 ||
		!cp.WillFlag || cp.WillQos != 1 || !cp.WillRetain || cp.WillTopic != PresenceTopic("lean-1") || string(cp.WillMessage) != `{"status":"offline"}` {
		t.Fatalf("CONNECT = %v", cp)
	}
	connack(t, conn, 0)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if ev.connects.Load() != 1 || !c.isOpen() {
		t.Fatalf("connects %d open %v after connect", ev.connects.Load(), c.isOpen())
	}
	c.close()
	if _, ok := readPacket(t, conn).(*packets.DisconnectPacket); !ok {
		t.Fatal("close sent no DISCONNECT")
	}
	if c.isOpen() {
		t.Fatal("open after close")
	}
	if err := c.publish(context.Background(), "a/b", 1, false, nil); !errors.Is(err, errLeanClosed) {
		t.Fatalf("publish after close = %v, want errLeanClosed", err)
	}
}

func TestLeanClientConnackRefused(t *testing.T) {
	for rc, want := range map[byte]string{1: "protocol version", 2: "identifier rejected", 3: "unavailable", 4: "bad user name or password", 5: "not authorized", 9: "refused"} {
		t.Run(want, func(t *testing.T) {
			p := startLeanPeer(t)
			c, _ := newLeanTestClient(t, p, nil)
			errc := make(chan error, 1)
			go func() { errc <- c.connect(context.Background()) }()
			conn, _ := p.accept(t)
			connack(t, conn, rc)
			err := <-errc
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("connect = %v, want an error that says %q", err, want)
			}
		})
	}
}

// A broker that accepts TCP but never answers CONNECT: connect gives up at
// its context's end.
func TestLeanClientConnectBounded(t *testing.T) {
	p := startLeanPeer(t)
	c, _ := newLeanTestClient(t, p, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- c.connect(ctx) }()
	p.accept(t)
	if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connect = %v, want DeadlineExceeded", err)
	}
}

func TestLeanClientSubscribe(t *testing.T) {
	p := startLeanPeer(t)
	c, _ := newLeanTestClient(t, p, nil)
	conn := connectLean(t, c, p)
	filters := []string{"$share/g1/ff/v1/mcp/+/+/+/+/+/req", "ff/v1/mcp/agents/+/status"}
	for _, tc := range []struct {
		name  string
		codes []byte
		ok    bool
	}{{"granted", []byte{1, 0}, true}, {"refused", []byte{1, 0x80}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			errc := make(chan error, 1)
			go func() { errc <- c.subscribe(context.Background(), filters...) }()
			sp, ok := readPacket(t, conn).(*packets.SubscribePacket)
			if !ok || len(sp.Topics) != 2 || sp.Topics[0] != filters[0] || sp.Topics[1] != filters[1] || sp.Qoss[0] != 1 || sp.Qoss[1] != 1 {
				t.Fatalf("SUBSCRIBE = %v", sp)
			}
			ack := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
			ack.MessageID, ack.ReturnCodes = sp.MessageID, tc.codes
			writePacket(t, conn, ack)
			if err := <-errc; (err == nil) != tc.ok {
				t.Fatalf("subscribe = %v, want ok %v", err, tc.ok)
			}
		})
	}
	errc := make(chan error, 1)
	go func() { errc <- c.unsubscribe(context.Background(), filters[0]) }()
	up, ok := readPacket(t, conn).(*packets.UnsubscribePacket)
	if !ok || len(up.Topics) != 1 || up.Topics[0] != filters[0] {
		t.Fatalf("UNSUBSCRIBE = %v", up)
	}
	ack := packets.NewControlPacket(packets.Unsuback).(*packets.UnsubackPacket)
	ack.MessageID = up.MessageID
	writePacket(t, conn, ack)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// Requests come in at QoS 0 and 1; the QoS 1 one is acknowledged. A QoS 1
// publish waits for its PUBACK, honours its context, and one cut by a lost
// connection goes again, marked DUP, on the next.
func TestLeanClientPublish(t *testing.T) {
	p := startLeanPeer(t)
	c, ev := newLeanTestClient(t, p, nil)
	conn := connectLean(t, c, p)

	for qos := range byte(2) {
		in := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		in.Qos, in.MessageID, in.TopicName, in.Payload = qos, 77, "t/req", []byte("hello")
		writePacket(t, conn, in)
		select {
		case m := <-ev.msgs:
			if m != [2]string{"t/req", "hello"} {
				t.Fatalf("message %q", m)
			}
		case <-time.After(leanWait):
			t.Fatal("no message")
		}
	}
	if ack, ok := readPacket(t, conn).(*packets.PubackPacket); !ok || ack.MessageID != 77 {
		t.Fatalf("packet %v, want PUBACK 77", ack)
	}

	if err := c.publish(context.Background(), "t/res", 0, false, []byte("q0")); err != nil {
		t.Fatal(err)
	}
	if got := readPacket(t, conn).(*packets.PublishPacket); got.Qos != 0 || string(got.Payload) != "q0" {
		t.Fatalf("QoS 0 publish = %v", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.publish(ctx, "t/res", 1, true, []byte("abandoned")) }()
	if got := readPacket(t, conn).(*packets.PublishPacket); got.Qos != 1 || !got.Retain || string(got.Payload) != "abandoned" {
		t.Fatalf("QoS 1 publish = %v", got)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("publish with ctx cancelled = %v", err)
	}

	go func() { errc <- c.publish(context.Background(), "t/res", 1, false, []byte("again")) }()
	first := readPacket(t, conn).(*packets.PublishPacket)
	if first.Dup || string(first.Payload) != "again" {
		t.Fatalf("publish = %v", first)
	}
	_ = conn.Close() // no PUBACK: the client reconnects and sends it again
	select {
	case <-ev.lost:
	case <-time.After(leanWait):
		t.Fatal("connection loss not reported")
	}
	conn2, _ := p.accept(t)
	connack(t, conn2, 0)
	again := readPacket(t, conn2).(*packets.PublishPacket)
	if !again.Dup || again.MessageID != first.MessageID || string(again.Payload) != "again" {
		t.Fatalf("resent publish = %v, want DUP of %v", again, first)
	}
	writePacket(t, conn2, puback(again.MessageID))
	if err := <-errc; err != nil {
		t.Fatalf("publish across a reconnect = %v", err)
	}
	if n := ev.connects.Load(); n != 2 {
		t.Fatalf("onConnect called %d times, want 2", n)
	}
}

// A broker that stops answering PINGREQ loses the connection at the ping
// timeout; the client reconnects by itself.
func TestLeanClientPingTimeout(t *testing.T) {
	p := startLeanPeer(t)
	c, ev := newLeanTestClient(t, p, func(o *leanOptions) {
		o.keepAlive, o.pingTimeout = 150*time.Millisecond, 150*time.Millisecond
	})
	conn := connectLean(t, c, p)
	if _, ok := readPacket(t, conn).(*packets.PingreqPacket); !ok {
		t.Fatal("want PINGREQ on an idle connection")
	}
	writePacket(t, conn, packets.NewControlPacket(packets.Pingresp))
	if _, ok := readPacket(t, conn).(*packets.PingreqPacket); !ok {
		t.Fatal("want a second PINGREQ")
	}
	// No answer this time.
	select {
	case err := <-ev.lost:
		if err == nil {
			t.Fatal("lost with no error")
		}
	case <-time.After(leanWait):
		t.Fatal("the unanswered ping did not break the connection")
	}
	conn2, _ := p.accept(t)
	connack(t, conn2, 0)
	deadline := time.Now().Add(leanWait)
	for ev.connects.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("no onConnect after the reconnect")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A subscribe in flight when the connection breaks fails at once.
func TestLeanClientSubscribeFailsOnLoss(t *testing.T) {
	p := startLeanPeer(t)
	c, _ := newLeanTestClient(t, p, func(o *leanOptions) { o.maxBackoff = time.Hour })
	conn := connectLean(t, c, p)
	errc := make(chan error, 1)
	go func() { errc <- c.subscribe(context.Background(), "a/#") }()
	readPacket(t, conn)
	_ = conn.Close()
	if err := <-errc; !errors.Is(err, errLeanConnLost) {
		t.Fatalf("subscribe = %v, want errLeanConnLost", err)
	}
}

// TestLeanConnConcurrentWriters: packets of writers that run at once (some
// taken along by another's write, some large ones written with writev)
// arrive whole, each writer's in its own order.
func TestLeanConnConcurrentWriters(t *testing.T) {
	raw, peer := tcpPair(t)
	c := newLeanConn(raw, bufio.NewReader(raw))
	t.Cleanup(func() { c.close(false) })
	const writers, each = 8, 50
	errc := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				payload := []byte(fmt.Sprintf("%d:%d", w, i))
				if i%10 == 9 {
					payload = append(payload, bytes.Repeat([]byte("z"), 2*leanCopyLimit)...)
				}
				if err := c.writePublish(fmt.Sprint("w/", w), uint16(w*each+i+1), 1, false, false, payload); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	next := make([]int, writers)
	for range writers * each {
		p, ok := readPacket(t, peer).(*packets.PublishPacket)
		if !ok {
			t.Fatal("want a PUBLISH")
		}
		var w, i int
		if _, err := fmt.Sscanf(string(p.Payload), "%d:%d", &w, &i); err != nil || p.TopicName != fmt.Sprint("w/", w) || i != next[w] {
			t.Fatalf("PUBLISH %s %.20q: want writer %d's packet %d", p.TopicName, p.Payload, w, next[w])
		}
		next[w]++
	}
	for range writers {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func TestLeanConnWritersRunnableTogetherShareAWrite(t *testing.T) {
	// On one P the workers woken together run one after the other: each
	// appends its reply and yields, and the first one back writes them
	// all. Without the yield each writes its own. The yields start off,
	// as after a quiet spell: on one P only the probe turns them on.
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	raw, peer := tcpPair(t)
	c := newLeanConn(raw, bufio.NewReader(raw))
	t.Cleanup(func() { c.close(false) })
	for range coalesce.Off { // off, as after a quiet spell
		c.yield.Wrote(1)
	}
	const writers = 15 // 15: the probe (one write in 64) must not always fall on a round's last writer
	sent := 0
	round := func() {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				<-start
				if err := c.writePublish("w", uint16(sent+w+1), 1, false, false, []byte(fmt.Sprint(w))); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		sent += writers
	}
	for range 16 {
		if round(); c.yield.On() {
			break
		}
	}
	if !c.yield.On() {
		t.Fatalf("the yields never came back on in %d writes", sent)
	}
	// On: count the writes of a few more rounds.
	before := c.writes.Load()
	const rounds = 4
	for range rounds {
		round()
	}
	if n := c.writes.Load() - before; n > writers*rounds/4 {
		t.Errorf("%d replies from workers woken %d at a time made %d writes, want at most %d", writers*rounds, writers, n, writers*rounds/4)
	}
	for range sent { // a few KiB: the socket holds them
		if _, ok := readPacket(t, peer).(*packets.PublishPacket); !ok {
			t.Fatal("want a PUBLISH")
		}
	}
	// Replies alone, coalesce.Off of them in a row, turn the yields off.
	for i := range coalesce.Off {
		if err := c.writePublish("w", uint16(100+i), 1, false, false, []byte("alone")); err != nil {
			t.Fatal(err)
		}
		if _, ok := readPacket(t, peer).(*packets.PublishPacket); !ok {
			t.Fatal("want a PUBLISH")
		}
	}
	if c.yield.On() {
		t.Errorf("still yielding after %d writes of one reply", coalesce.Off)
	}
}
