package broker

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sirupsen/logrus"
)

// connTracker owns the goroutines that serve the connections of one
// listener and the connections themselves.
//
// It exists because mochi's own listeners leave three holes this broker
// cannot have: no deadline for the CONNECT packet (a silent TCP connection
// holds a goroutine, and mochi's Close, forever), a WaitGroup.Add that races
// with Close's Wait, and connections accepted during Close that nobody
// closes. The tracker sets the CONNECT deadline (mochi replaces it with the
// keepalive deadline once the client is logged in), closes every connection
// it still holds on Close and waits for all of its goroutines.
type connTracker struct {
	id             string
	srv            *mqtt.Server // whose clients Close disconnects
	connectTimeout time.Duration
	maxConns       int // open connections, logged in or not; more are closed at once
	preauth        *preauth
	began, ended   func(net.Conn)
	log            *logrus.Entry

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // one per establish goroutine
}

func newConnTracker(id string, lim connLimits, srv *mqtt.Server, log *logrus.Entry) *connTracker {
	return &connTracker{
		id:             id,
		srv:            srv,
		connectTimeout: lim.connectTimeout,
		maxConns:       lim.maxConns,
		preauth:        lim.preauth,
		began:          lim.began,
		ended:          lim.ended,
		log:            log.WithField("listener", id),
		conns:          make(map[net.Conn]struct{}),
	}
}

// connLimits bound the connections of one listener.
type connLimits struct {
	// connectTimeout bounds the wait for CONNECT (and the TLS or WebSocket
	// handshake).
	connectTimeout time.Duration
	// maxConns bounds the open connections. mochi's MaximumClients counts
	// logged-in clients only, so without this a flood of connections that
	// never log in would hold goroutines and buffers until connectTimeout.
	maxConns int
	// preauth, if set, bounds the connections not logged in yet (across
	// the broker's listeners).
	preauth *preauth
	// began and ended, if set, are called with each connection before
	// mochi serves it and once it is done with it (takeoverHook).
	began, ended func(net.Conn)
}

// admit registers c, unless the tracker is closed (it reports false) or full
// (it reports true but closes c). Either way a refused c is closed. The
// connections the pre-login budget gives up for c (preauth.enter) are
// closed here too, after the lock.
func (t *connTracker) admit(c net.Conn) (open, admitted bool) {
	var evicted []net.Conn
	defer func() {
		for _, old := range evicted {
			_ = old.Close()
			t.log.WithField("remote", old.RemoteAddr().String()).Debug("connection closed: waited longest to log in while the budget was spent")
		}
	}()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		_ = c.Close()
		return false, false
	case len(t.conns) >= t.maxConns:
		_ = c.Close()
		t.log.WithField("remote", c.RemoteAddr().String()).Debug("connection refused: too many open connections")
		return true, false
	}
	if t.preauth != nil {
		evicted = t.preauth.enter(c)
	}
	t.conns[c] = struct{}{}
	t.wg.Add(1) // under mu, so that it cannot race with close's Wait
	return true, true
}

// serveConn runs establish for c on a goroutine the tracker owns. It reports
// false (and closes c) once the tracker is closed.
func (t *connTracker) serveConn(c net.Conn, establish listeners.EstablishFn) bool {
	open, admitted := t.admit(c)
	if !admitted {
		return open
	}

	_ = c.SetDeadline(time.Now().Add(t.connectTimeout))
	go func() {
		defer t.wg.Done()
		t.establish(c, establish)
	}()
	return true
}

// run runs establish for c on the calling goroutine (a WebSocket handler's),
// counted like serveConn's goroutines. It reports false (and closes c) once
// the tracker is closed.
func (t *connTracker) run(c net.Conn, establish listeners.EstablishFn) bool {
	open, admitted := t.admit(c)
	if !admitted {
		return open
	}
	defer t.wg.Done()
	_ = c.SetDeadline(time.Now().Add(t.connectTimeout))
	t.establish(c, establish)
	return true
}

// establish runs mochi's handler for c on the calling goroutine and forgets
// c when it returns.
func (t *connTracker) establish(c net.Conn, establish listeners.EstablishFn) {
	defer func() {
		t.mu.Lock()
		delete(t.conns, c)
		t.mu.Unlock()
		if t.preauth != nil {
			t.preauth.leave(c)
		}
		_ = c.Close()
		if t.ended != nil {
			t.ended(c)
		}
	}()
	if t.began != nil {
		t.began(c)
	}
	if err := establish(t.id, c); err != nil {
		// Most of these are clients going away or being refused; the hook
		// has already logged refusals with their reason.
		t.log.WithError(err).WithField("remote", c.RemoteAddr().String()).Debug("client connection ended")
	}
}

// disconnectClients disconnects the logged-in clients of the listener, as
// mochi's closeListenerClients (the CloseFn mochi hands to Close) does, but
// without its lock bug: mochi's Clients.GetByListener takes the clients'
// read lock twice (once more through Len), so a client logging in or
// leaving at that moment (a writer waiting between the two) deadlocks the
// broker's Close for good. Clients.GetAll takes it once.
func (t *connTracker) disconnectClients() {
	for _, cl := range t.srv.Clients.GetAll() {
		if cl.Net.Listener == t.id && !cl.Closed() {
			disconnect(cl, packets.ErrServerShuttingDown)
		}
	}
}

// disconnect ends cl's connection from the broker's side: an MQTT 5 client
// hears DISCONNECT with code, then the network connection closes. mochi's
// read loop then fails, publishes the client's Will and stops the client,
// as for any connection closed without the client's own DISCONNECT
// (MQTT 5.0, 3.1.2.5).
//
// mochi's DisconnectClient stops the client instead of closing its
// connection. When the client's read loop is between two packets at that
// moment, the loop finds the client stopped, takes it for a DISCONNECT of
// the client's own and drops the Will: an expert agent cut off that way
// stayed online in its retained presence, and the calls it was serving
// waited for their deadlines.
//
// A client that has stopped reading gets disconnectWriteTimeout to take
// the DISCONNECT: its connection is closed then, which also frees mochi's
// write to it in progress (a v3.1.1 client with keepalive 0 has no
// deadline), so that one stalled client cannot hold up Broker.Disconnect
// or the listener's close.
func disconnect(cl *mqtt.Client, code packets.Code) {
	if cl.Net.Conn == nil {
		return
	}
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Disconnect},
		ReasonCode:  code.Code,
	}
	if code.Code >= packets.ErrUnspecifiedError.Code {
		pk.Properties.ReasonString = code.Reason
	}
	stalled := time.AfterFunc(disconnectWriteTimeout, func() { _ = cl.Net.Conn.Close() })
	// A write that fails (the connection is already going) changes nothing:
	// the close below ends it all the same.
	_ = cl.WritePacket(pk)
	stalled.Stop()
	_ = cl.Net.Conn.Close()
}

// disconnectWriteTimeout bounds the DISCONNECT write of disconnect.
const disconnectWriteTimeout = time.Second

// close stops new connections, closes the ones still held (those that have
// not finished logging in, or that mochi failed to close) and waits for
// every establish goroutine.
func (t *connTracker) close() {
	t.mu.Lock()
	t.closed = true
	conns := make([]net.Conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	t.wg.Wait()
}

// netListener is a mochi listener over a net.Listener the broker has bound
// itself (TCP or TLS), so that Start returns with the port bound and known.
type netListener struct {
	ln       net.Listener
	protocol string
	tracker  *connTracker

	mu      sync.Mutex
	closed  bool
	serving bool
	done    chan struct{} // closed by Close
	served  chan struct{} // closed when Serve returns
}

var _ listeners.Listener = (*netListener)(nil)

func newNetListener(id, protocol string, ln net.Listener, lim connLimits, srv *mqtt.Server, log *logrus.Entry) *netListener {
	return &netListener{
		ln:       ln,
		protocol: protocol,
		tracker:  newConnTracker(id, lim, srv, log),
		done:     make(chan struct{}),
		served:   make(chan struct{}),
	}
}

func (l *netListener) ID() string                { return l.tracker.id }
func (l *netListener) Address() string           { return l.ln.Addr().String() }
func (l *netListener) Protocol() string          { return l.protocol }
func (l *netListener) Init(_ *slog.Logger) error { return nil }

// Serve accepts connections until the listener is closed. mochi runs it on
// a goroutine of its own; Close waits for it to return.
func (l *netListener) Serve(establish listeners.EstablishFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.serving = true
	l.mu.Unlock()
	defer close(l.served)

	var backoff time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http does, rather than stop serving for good.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.tracker.log.WithError(err).Warn("accept failed; retrying")
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
				continue
			case <-l.done:
				t.Stop()
				return
			}
		}
		backoff = 0
		if !l.tracker.serveConn(&endConn{Conn: c}, establish) {
			return
		}
	}
}

// Close stops accepting, disconnects the logged-in clients of this listener
// (disconnectClients, in place of mochi's CloseFn), then closes whatever
// connection is left and waits for every goroutine of the listener. It is
// safe to call more than once and before Serve.
func (l *netListener) Close(_ listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	serving := l.serving
	close(l.done)
	l.mu.Unlock()

	_ = l.ln.Close()
	l.tracker.disconnectClients()
	l.tracker.close()
	if serving {
		<-l.served
	}
}
