package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/sirupsen/logrus"
)

// Broker is the embedded MQTT broker.
type Broker struct {
	opts  Options
	log   *logrus.Entry
	srv   *mqtt.Server
	hook  *aclHook
	clock *connClock // connection times, for Clients
	// takeover voids a replaced agent's presence Will and repairs what
	// mochi's clean takeover race breaks.
	takeover *takeoverHook
	preauth  *preauth // the connections not logged in yet
	bus      *InlineBus
	ctx      context.Context // lives until Close
	cancel   context.CancelFunc

	mu    sync.Mutex
	state int // stateNew, stateStarted, stateClosed
	tcp   net.Addr
	tls   net.Addr
	ws    net.Addr

	closeOnce sync.Once
	closeErr  error
}

const (
	stateNew = iota
	stateStarted
	stateClosed
)

// New returns a broker configured by opts. It binds nothing; Start does.
func New(opts Options) (*Broker, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = o.MaxPacketSize
	caps.MaximumSessionExpiryInterval = uint32(seconds(o.SessionExpiry, math.MaxUint32))
	caps.MaximumClients = int64(o.MaxClients)
	// mochi deletes every retained message older than this, whatever its
	// own expiry: with mochi's default (24h) an agent online for a day
	// would lose its retained presence, and a gateway starting after that
	// would see no agent. Sessions (SessionExpiry) and request deadlines
	// bound everything else, so there is no broker-wide maximum. A v5
	// client's own message expiry is still honoured.
	caps.MaximumMessageExpiryInterval = 0
	// Each client gets a channel of this many pending writes, allocated at
	// connect (mochi's 8192 is 64 KiB per client); beyond it, messages to a
	// client that does not read are dropped and counted.
	caps.MaximumClientWritesPending = 1024
	// mochi checks the ACL on a PUBLISH's topic name before it resolves a
	// topic alias, so an alias would be checked as the empty topic. No
	// aliases: a v5 client that uses one anyway is disconnected.
	caps.TopicAliasMaximum = 0

	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		opts:   o,
		log:    o.Logger,
		ctx:    ctx,
		cancel: cancel,
	}
	b.srv = mqtt.New(&mqtt.Options{
		Capabilities: caps,
		InlineClient: true,
		Logger:       slog.New(newSlogHandler(o.Logger.WithField("lib", "mochi"))),
		// Nobody may subscribe to $SYS (the ACL denies '$' topics), and each
		// update calls runtime.ReadMemStats, which stops the world: update
		// rarely.
		SysTopicResendInterval: 3600,
	})
	// Before the ACL hook, whose OnConnect runs the login: the budget
	// hears first that a login began.
	b.preauth = newPreauth(o.MaxPreAuthConns, o.MaxPreAuthPerSource)
	if err := b.srv.AddHook(&preauthHook{p: b.preauth}, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("broker: add preauth hook: %w", err)
	}
	b.hook = newACLHook(ctx, b.srv, o, 2*runtime.GOMAXPROCS(0))
	if err := b.srv.AddHook(b.hook, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("broker: add acl hook: %w", err)
	}
	b.clock = &connClock{}
	if err := b.srv.AddHook(b.clock, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("broker: add clock hook: %w", err)
	}
	b.takeover = newTakeoverHook(b.srv, b.log)
	if err := b.srv.AddHook(b.takeover, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("broker: add takeover hook: %w", err)
	}
	// After the ACL hook: it sees only the publishes the ACL hook let
	// through.
	if err := b.srv.AddHook(newPresenceHook(ctx, b.srv, b.takeover, b.log), nil); err != nil {
		cancel()
		return nil, fmt.Errorf("broker: add presence hook: %w", err)
	}
	if err := b.srv.AddHook(&shareHook{srv: b.srv}, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("broker: add share hook: %w", err)
	}
	b.bus = newInlineBus(b.srv, o.InlineQoS)
	if err := b.srv.AddHook(&inlineHook{bus: b.bus}, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("broker: add inline hook: %w", err)
	}
	if err := b.addEventsHook(); err != nil { // after the ACL hook: see eventsHook
		cancel()
		return nil, fmt.Errorf("broker: add events hook: %w", err)
	}
	return b, nil
}

// Start binds the configured listeners and starts serving. The listeners are
// bound when it returns (Addr and friends report the real ports). ctx bounds
// the start only. After a failed Start, Close the broker.
func (b *Broker) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateStarted:
		return ErrStarted
	case stateClosed:
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("broker: start: %w", err)
	}

	var bound []net.Listener
	fail := func(err error) error {
		for _, ln := range bound {
			_ = ln.Close()
		}
		return err
	}
	var lc net.ListenConfig
	listen := func(addr string) (net.Listener, error) {
		ln, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("broker: listen %s: %w", addr, err)
		}
		bound = append(bound, ln)
		return ln, nil
	}
	lim := b.connLimits()
	var ls []listeners.Listener
	if b.opts.Addr != "" {
		ln, err := listen(b.opts.Addr)
		if err != nil {
			return fail(err)
		}
		b.tcp = ln.Addr()
		ls = append(ls, newNetListener("tcp", "tcp", ln, lim, b.srv, b.log))
	}
	if b.opts.TLSAddr != "" {
		ln, err := listen(b.opts.TLSAddr)
		if err != nil {
			return fail(err)
		}
		b.tls = ln.Addr()
		ls = append(ls, newNetListener("tls", "tls", tls.NewListener(ln, b.opts.TLSConfig), lim, b.srv, b.log))
	}
	if b.opts.WSAddr != "" {
		ln, err := listen(b.opts.WSAddr)
		if err != nil {
			return fail(err)
		}
		b.ws = ln.Addr()
		ls = append(ls, newWSListener("ws", ln, lim, b.opts.MaxPacketSize, b.srv, b.log))
	}
	for _, l := range ls {
		if err := b.srv.AddListener(l); err != nil {
			return fail(fmt.Errorf("broker: add listener %s: %w", l.ID(), err))
		}
	}
	if err := b.srv.Serve(); err != nil {
		return fail(fmt.Errorf("broker: serve: %w", err))
	}
	b.state = stateStarted
	b.log.WithFields(logrus.Fields{
		"tcp": addrString(b.tcp), "tls": addrString(b.tls), "ws": addrString(b.ws),
	}).Info("mqtt broker started")
	return nil
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// Addr is the bound address of the TCP listener, nil before Start or
// without one.
func (b *Broker) Addr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tcp
}

// TLSAddr is the bound address of the TLS listener, nil before Start or
// without one.
func (b *Broker) TLSAddr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tls
}

// WSAddr is the bound address of the WebSocket listener, nil before Start or
// without one.
func (b *Broker) WSAddr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ws
}

// Bus is the broker's in-process client. It works from New on (before Start
// it reaches only other inline subscriptions) until Close.
func (b *Broker) Bus() *InlineBus { return b.bus }

// Ready reports whether the broker accepts connections: nil once Start has
// succeeded and a TCP connection to the TCP listener succeeds (without a TCP
// listener, once started). It does not wait for a later start.
func (b *Broker) Ready(ctx context.Context) error {
	b.mu.Lock()
	state, addr := b.state, b.tcp
	b.mu.Unlock()
	switch state {
	case stateNew:
		return ErrNotStarted
	case stateClosed:
		return ErrClosed
	}
	if addr == nil {
		return nil
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, addr.Network(), addr.String())
	if err != nil {
		return fmt.Errorf("broker: not ready: %w", err)
	}
	return c.Close()
}

// Close disconnects every client, stops the listeners and waits for their
// goroutines. Logins in progress are aborted. It is idempotent; the
// InlineBus fails with ErrClosed afterwards.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.state = stateClosed
		b.mu.Unlock()
		b.cancel()
		b.bus.close()
		if err := b.srv.Close(); err != nil {
			b.closeErr = fmt.Errorf("broker: close: %w", err)
		}
		b.hook.lines.Close() // the counts of repeated lines, and no timer left
		b.log.Info("mqtt broker stopped")
	})
	return b.closeErr
}

// InlineSubscribed reports whether the inline client holds a subscription to
// exactly filter.
func (b *Broker) InlineSubscribed(filter string) bool { return b.bus.subscribed(filter) }

// ClientCount is the number of connected MQTT clients (the inline client
// and disconnected sessions not counted).
func (b *Broker) ClientCount() int {
	return int(atomic.LoadInt64(&b.srv.Info.ClientsConnected))
}
