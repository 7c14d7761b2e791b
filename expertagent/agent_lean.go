package expertagent

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// leanClient is the Agent's own MQTT 3.1.1 client, for tcp:// and ssl://
// brokers (agentLeanURL): what the Agent needs of MQTT and nothing more, in
// few goroutine hand-offs.
//
// paho moves every packet through four goroutines (reader, incoming comms,
// router, the handler's caller) and every publish through two more
// (outbound queue, writer), and completes its tokens the same way back:
// most of the agent's CPU per call went to those hand-offs. Here one
// goroutine (run) reads packets and hands each request straight to the
// Agent (which queues it for a worker), completes the waits of publishes,
// subscribes and unsubscribes, and reconnects when the connection breaks.
// Writes go from the calling goroutine straight to the socket (leanConn).
// A second goroutine (keepalive) pings an idle connection and closes one
// that does not answer. Both stop in close.
//
// Sessions are clean. A QoS 1 publish waits for its PUBACK; one in flight
// when the connection breaks is sent again (DUP) once it is back, as paho
// does, until its wait ends. Subscriptions are not restored: onConnect
// tells the owner to subscribe again.
type leanClient struct {
	opts leanOptions
	log  *logrus.Entry

	ctx    context.Context // cancelled by close: ends dials and backoff sleeps
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	kaDone chan struct{} // closed when keepalive returns

	mu      sync.Mutex
	conn    *leanConn // nil while disconnected
	pending map[uint16]*leanPending
	nextID  uint16
	started bool
	closed  bool
}

// leanOptions configures a leanClient.
type leanOptions struct {
	url                *url.URL // scheme tcp, mqtt, ssl, tls or mqtts
	tls                *tls.Config
	clientID           string
	username, password string
	will               leanWill
	keepAlive          time.Duration // 0 = no keepalive
	pingTimeout        time.Duration
	connectTimeout     time.Duration
	maxBackoff         time.Duration // longest wait between reconnect attempts

	onMessage func(topic string, payload []byte) // on the run goroutine: must not block
	onConnect func()                             // after each connection, also the first; must not block
	onLost    func(error)                        // when a connection breaks (not on close)
}

type leanWill struct {
	topic   string
	payload []byte
	qos     byte
	retain  bool
}

var (
	// errLeanConnLost fails the subscribes and unsubscribes in flight when
	// the connection breaks (publishes wait for the next connection).
	errLeanConnLost = errors.New("connection to the broker lost")
	// errLeanClosed fails every wait once the client is closed.
	errLeanClosed = errors.New("mqtt client closed")
	// errLeanNotConnected refuses a subscribe while no connection is up.
	errLeanNotConnected = errors.New("not connected to the broker")
	// errLeanPingTimeout breaks a connection whose broker does not answer PINGREQ.
	errLeanPingTimeout = errors.New("no PINGRESP from the broker")
)

// leanConnackErrors are CONNACK's refusals (MQTT 3.1.1, 3.2.2.3).
var leanConnackErrors = map[byte]string{
	1: "unacceptable protocol version",
	2: "client identifier rejected",
	3: "server unavailable",
	4: "bad user name or password",
	5: "not authorized",
}

// leanPending is a wait for an acknowledgement: a publish's PUBACK, a
// SUBACK or an UNSUBACK.
type leanPending struct {
	kind byte            // leanPublish, leanSubscribe or leanUnsubscribe
	done chan error      // capacity 1: the one completion never blocks
	pub  leanPublishArgs // kind leanPublish: what to send again after a reconnect
}

type leanPublishArgs struct {
	topic   string
	payload []byte
	qos     byte
	retain  bool
}

// agentLeanURL returns the broker URL parsed if the lean client can serve
// it: tcp://, mqtt://, ssl://, tls://, mqtts://, and no proxy configured
// (ALL_PROXY, which paho honours). WebSocket, unix sockets and proxies are
// paho's.
func agentLeanURL(brokerURL string) (*url.URL, bool) {
	u, err := url.Parse(brokerURL)
	if err != nil || u.Host == "" {
		return nil, false
	}
	switch u.Scheme {
	case "tcp", "mqtt", "ssl", "tls", "mqtts":
	default:
		return nil, false
	}
	if os.Getenv("ALL_PROXY") != "" || os.Getenv("all_proxy") != "" {
		return nil, false
	}
	return u, true
}

func newLeanClient(opts leanOptions, log *logrus.Entry) *leanClient {
	if opts.maxBackoff <= 0 {
		opts.maxBackoff = 30 * time.Second
	}
	if opts.pingTimeout <= 0 {
		opts.pingTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &leanClient{
		opts: opts, log: log, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), kaDone: make(chan struct{}),
		pending: make(map[uint16]*leanPending),
	}
}

// connect makes the first connection (bounded by ctx and connectTimeout),
// then starts the reader and the keepalive and calls onConnect. A failed
// first connection is not retried; later ones are, by run.
func (c *leanClient) connect(ctx context.Context) error {
	c.mu.Lock()
	if c.started || c.closed {
		c.mu.Unlock()
		return errors.New("mqtt client already started")
	}
	c.started = true
	c.mu.Unlock()
	conn, err := c.dial(ctx)
	if err != nil {
		close(c.done)
		close(c.kaDone)
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		conn.close(true)
		close(c.done)
		close(c.kaDone)
		return errLeanClosed
	}
	c.conn = conn
	c.mu.Unlock()
	go c.run(conn)
	go c.keepalive()
	c.opts.onConnect()
	return nil
}

// dial opens a connection and logs in: TCP (and TLS), CONNECT, CONNACK.
func (c *leanClient) dial(ctx context.Context) (*leanConn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.connectTimeout)
	defer cancel()
	host := c.opts.url.Host
	secure := c.opts.url.Scheme == "ssl" || c.opts.url.Scheme == "tls" || c.opts.url.Scheme == "mqtts"
	if c.opts.url.Port() == "" {
		port := "1883"
		if secure {
			port = "8883"
		}
		host = net.JoinHostPort(c.opts.url.Hostname(), port)
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = raw.Close()
		}
	}()
	// A ctx that ends (connectTimeout included) during the TLS handshake or
	// the login unblocks it; ctx's error is set by then.
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn := raw
	if secure {
		cfg := c.opts.tls.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" { // as crypto/tls.Dial
			cfg.ServerName = c.opts.url.Hostname()
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("tls: %w", leanCtxErr(ctx, err))
		}
		conn = tc
	}
	w := &c.opts.will
	pkt, err := leanAppendConnect(nil, &leanConnectPacket{
		clientID: c.opts.clientID, username: c.opts.username, password: c.opts.password,
		keepAlive: uint16(min(c.opts.keepAlive/time.Second, 0xFFFF)),
		willTopic: w.topic, willPayload: w.payload, willQoS: w.qos, willRetain: w.retain,
	})
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(pkt); err != nil {
		return nil, fmt.Errorf("send CONNECT: %w", leanCtxErr(ctx, err))
	}
	r := bufio.NewReaderSize(conn, agentReadBufferSize)
	p, err := leanReadPacket(r)
	if err != nil {
		return nil, fmt.Errorf("read CONNACK: %w", leanCtxErr(ctx, err))
	}
	if p.kind != leanConnack {
		return nil, fmt.Errorf("%w: packet type %d instead of CONNACK", errLeanProtocol, p.kind)
	}
	if rc := p.codes[1]; rc != 0 {
		why := leanConnackErrors[rc]
		if why == "" {
			why = "refused"
		}
		return nil, fmt.Errorf("connection refused by the broker: %s (CONNACK return code %d)", why, rc)
	}
	if !stop() {
		return nil, leanCtxErr(ctx, context.Canceled)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	ok = true
	return newLeanConn(conn, r), nil
}

// leanCtxErr names ctx's end as the cause of err when ctx ended: a
// deadline set to stop a dial reads as an i/o timeout otherwise.
func leanCtxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// run reads packets until the connection breaks, then reconnects (with
// backoff) and reads again, until close.
func (c *leanClient) run(conn *leanConn) {
	defer close(c.done)
	for {
		err := c.readLoop(conn)
		if !c.lost(conn) {
			return
		}
		c.opts.onLost(err)
		if conn = c.reconnect(); conn == nil {
			return
		}
		c.opts.onConnect()
	}
}

// readLoop handles packets until one cannot be read.
func (c *leanClient) readLoop(conn *leanConn) error {
	for {
		p, err := conn.read()
		if err != nil {
			return err
		}
		switch p.kind {
		case leanPublish:
			switch p.qos() {
			case 0:
			case 1:
				// Held first, so that a quick reply takes it along.
				conn.queueAck(p.id)
			default:
				return fmt.Errorf("%w: QoS 2 PUBLISH, never subscribed to", errLeanProtocol)
			}
			c.opts.onMessage(p.topic, p.payload)
		case leanPuback, leanUnsuback:
			c.complete(p.id, p.kind, nil)
		case leanSuback:
			c.complete(p.id, leanSuback, leanSubackErr(p.codes))
		case leanPingresp:
			conn.pingSent.Store(0)
		default:
			return fmt.Errorf("%w: unexpected packet type %d from the broker", errLeanProtocol, p.kind)
		}
	}
}

// leanSubackErr is nil if every filter was granted.
func leanSubackErr(codes []byte) error {
	for i, code := range codes {
		if code >= agentSubackFailure {
			return fmt.Errorf("filter %d refused by the broker (SUBACK %#x)", i+1, code)
		}
	}
	return nil
}

// leanAckKind is the kind of wait an acknowledgement ends.
func leanAckKind(ack byte) byte {
	switch ack {
	case leanPuback:
		return leanPublish
	case leanSuback:
		return leanSubscribe
	case leanUnsuback:
		return leanUnsubscribe
	}
	return 0
}

// complete ends the wait for id, if it is of the kind ack acknowledges.
func (c *leanClient) complete(id uint16, ack byte, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[id]
	if p == nil || p.kind != leanAckKind(ack) {
		return // an ack for a wait that gave up: nothing to do
	}
	delete(c.pending, id)
	p.done <- err
}

// lost tears conn down after its reader stopped; it reports whether the
// client should reconnect (false once closed).
func (c *leanClient) lost(conn *leanConn) bool {
	conn.close(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == conn {
		c.conn = nil
	}
	for id, p := range c.pending {
		if p.kind != leanPublish {
			delete(c.pending, id)
			p.done <- errLeanConnLost
		}
	}
	return !c.closed
}

// reconnect dials until it gets a connection (nil once closed): at once,
// then after 1 s, doubling up to maxBackoff. It sends the publishes still
// waiting for their PUBACK again before anything else.
func (c *leanClient) reconnect() *leanConn {
	backoff := time.Second
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return nil
		case <-t.C:
		}
		conn, err := c.dial(c.ctx)
		if err == nil {
			if c.resume(conn) {
				return conn
			}
			conn.close(true)
			return nil
		}
		if c.ctx.Err() != nil {
			return nil
		}
		c.log.WithError(err).WithField("retryIn", backoff.String()).Debug("reconnect failed")
		t.Reset(backoff)
		backoff = min(2*backoff, c.opts.maxBackoff)
	}
}

// resume installs conn and sends the publishes waiting for a PUBACK again;
// false if the client was closed meanwhile.
func (c *leanClient) resume(conn *leanConn) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.conn = conn
	type again struct {
		id uint16
		leanPublishArgs
	}
	var resend []again
	for id, p := range c.pending {
		if p.kind == leanPublish {
			resend = append(resend, again{id, p.pub})
		}
	}
	c.mu.Unlock()
	slices.SortFunc(resend, func(a, b again) int { return int(a.id) - int(b.id) })
	for _, p := range resend {
		// A failed write breaks conn: the reader sees it and reconnects again.
		_ = conn.writePublish(p.topic, p.id, p.qos, p.retain, true, p.payload)
	}
	return true
}

// keepalive sends PINGREQ when the connection read or wrote nothing for
// about a third of keepAlive, and closes a connection whose PINGRESP is
// pingTimeout late: run then reconnects.
func (c *leanClient) keepalive() {
	defer close(c.kaDone)
	if c.opts.keepAlive <= 0 {
		<-c.ctx.Done()
		return
	}
	tick := max(c.opts.keepAlive/3, 10*time.Millisecond)
	step := max(min(tick, c.opts.pingTimeout)/4, 5*time.Millisecond)
	t := time.NewTicker(step)
	defer t.Stop()
	var (
		last                *leanConn
		reads, writes       uint64
		readIdle, writeIdle time.Duration
	)
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		conn := c.conn
		c.mu.Unlock()
		if conn == nil {
			continue
		}
		if sent := conn.pingSent.Load(); sent != 0 {
			if time.Since(time.Unix(0, sent)) >= c.opts.pingTimeout {
				c.log.WithField("timeout", c.opts.pingTimeout.String()).Warn("broker did not answer PINGREQ; closing the connection")
				conn.close(false) // run sees the read fail and reconnects
			}
			continue
		}
		if conn != last {
			last, reads, writes, readIdle, writeIdle = conn, conn.reads.Load(), conn.writes.Load(), 0, 0
			continue
		}
		readIdle, reads = leanIdle(readIdle, step, reads, conn.reads.Load())
		writeIdle, writes = leanIdle(writeIdle, step, writes, conn.writes.Load())
		if readIdle < tick && writeIdle < tick {
			continue
		}
		readIdle, writeIdle = 0, 0
		conn.pingSent.Store(time.Now().UnixNano())
		// A failed write breaks the connection: the reader sees it.
		_ = conn.writePacket(func(b []byte) []byte { return append(b, leanPingreq<<4, 0) })
	}
}

// leanIdle adds step to idle if the counter did not move, else resets it.
func leanIdle(idle, step time.Duration, before, now uint64) (time.Duration, uint64) {
	if now != before {
		return 0, now
	}
	return idle + step, now
}

// publish sends payload on topic at qos; at QoS 1 it waits for the PUBACK,
// at most until ctx is done or agentOpTimeout. While the client is
// reconnecting a QoS 1 publish waits for the next connection.
func (c *leanClient) publish(ctx context.Context, topic string, qos byte, retain bool, payload []byte) error {
	if err := leanCheckPublish(topic, len(payload)); err != nil {
		return err
	}
	if qos == 0 {
		c.mu.Lock()
		conn, closed := c.conn, c.closed
		c.mu.Unlock()
		switch {
		case closed:
			return errLeanClosed
		case conn == nil:
			return errLeanNotConnected
		}
		return conn.writePublish(topic, 0, 0, retain, false, payload)
	}
	p := leanPendings.Get().(*leanPending)
	p.kind, p.pub = leanPublish, leanPublishArgs{topic: topic, payload: payload, qos: 1, retain: retain}
	id, conn, err := c.register(p)
	if err != nil {
		c.recycle(p)
		return err
	}
	if conn != nil {
		// A failed write breaks the connection; the publish goes again on
		// the next one, within this wait.
		_ = conn.writePublish(topic, id, 1, retain, false, payload)
	}
	return c.wait(ctx, id, p)
}

// subscribe subscribes to filters at QoS 1 and checks the SUBACK.
func (c *leanClient) subscribe(ctx context.Context, filters ...string) error {
	if err := leanCheckFilters(filters); err != nil {
		return err
	}
	return c.request(ctx, leanSubscribe, func(b []byte, id uint16) []byte { return leanAppendSubscribe(b, id, 1, filters) })
}

// unsubscribe unsubscribes from filters.
func (c *leanClient) unsubscribe(ctx context.Context, filters ...string) error {
	if err := leanCheckFilters(filters); err != nil {
		return err
	}
	return c.request(ctx, leanUnsubscribe, func(b []byte, id uint16) []byte { return leanAppendUnsubscribe(b, id, filters) })
}

// request writes a SUBSCRIBE or UNSUBSCRIBE and waits for its ack.
func (c *leanClient) request(ctx context.Context, kind byte, build func([]byte, uint16) []byte) error {
	p := leanPendings.Get().(*leanPending)
	p.kind = kind
	id, conn, err := c.register(p)
	if err == nil && conn == nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		err = errLeanNotConnected
	}
	if err != nil {
		c.recycle(p)
		return err
	}
	if err := conn.writePacket(func(b []byte) []byte { return build(b, id) }); err != nil {
		c.abandon(id, p)
		return err
	}
	return c.wait(ctx, id, p)
}

// leanPendings recycles waits: every reply has one.
var leanPendings = sync.Pool{New: func() any { return &leanPending{done: make(chan error, 1)} }}

// recycle returns p, complete and out of the table, to the pool.
func (c *leanClient) recycle(p *leanPending) {
	p.pub = leanPublishArgs{}
	leanPendings.Put(p)
}

// register gives p a free packet id and enters it in the table; conn is the
// connection to write on, nil while reconnecting.
func (c *leanClient) register(p *leanPending) (uint16, *leanConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, nil, errLeanClosed
	}
	if len(c.pending) >= 0xFFFF {
		return 0, nil, errors.New("no free packet id: 65535 acknowledgements outstanding")
	}
	for {
		c.nextID++
		if c.nextID == 0 {
			c.nextID = 1
		}
		if c.pending[c.nextID] == nil {
			break
		}
	}
	c.pending[c.nextID] = p
	return c.nextID, c.conn, nil
}

// leanTimers recycles the timers of wait: every reply waits for its PUBACK.
var leanTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// wait waits for p's acknowledgement, at most until ctx is done and never
// longer than agentOpTimeout.
func (c *leanClient) wait(ctx context.Context, id uint16, p *leanPending) error {
	select { // acknowledged already: no timer needed
	case err := <-p.done:
		c.recycle(p)
		return err
	default:
	}
	t := leanTimers.Get().(*time.Timer)
	t.Reset(agentOpTimeout)
	defer func() {
		t.Stop() // since Go 1.23 no stale tick survives Stop
		leanTimers.Put(t)
	}()
	select {
	case err := <-p.done:
		c.recycle(p)
		return err
	case <-ctx.Done():
		c.abandon(id, p)
		return ctx.Err()
	case <-t.C:
		c.abandon(id, p)
		return fmt.Errorf("no acknowledgement from the broker after %s", agentOpTimeout)
	}
}

// abandon takes p out of the table after its waiter gave up. If the ack
// came meanwhile, its completion is in p.done (sent under mu) and is
// drained, so that p is clean for its next user.
func (c *leanClient) abandon(id uint16, p *leanPending) {
	c.mu.Lock()
	if c.pending[id] == p {
		delete(c.pending, id)
	} else {
		select {
		case <-p.done:
		default:
		}
	}
	c.mu.Unlock()
	c.recycle(p)
}

// isOpen reports whether a connection is up.
func (c *leanClient) isOpen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn != nil && !c.closed
}

// close sends DISCONNECT (the broker drops the Will), closes the
// connection, fails every wait with errLeanClosed and stops the goroutines,
// waiting for them at most agentOpTimeout.
func (c *leanClient) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	conn := c.conn
	c.conn = nil
	for id, p := range c.pending {
		delete(c.pending, id)
		p.done <- errLeanClosed
	}
	started := c.started
	c.mu.Unlock()
	c.cancel()
	if conn != nil {
		conn.close(true)
	}
	if !started {
		return
	}
	t := time.NewTimer(agentOpTimeout)
	defer t.Stop()
	for _, ch := range []chan struct{}{c.done, c.kaDone} {
		select {
		case <-ch:
		case <-t.C:
			c.log.Warn("mqtt client goroutines did not stop in time")
			return
		}
	}
}
