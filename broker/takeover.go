package broker

import (
	"net"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sirupsen/logrus"
)

// takeoverHook keeps a client ID's presence Will from outliving a takeover,
// and repairs what mochi's clean takeover race breaks.
//
// When a client logs in with the client ID of a connected client (an agent
// restarted before the broker noticed that the old connection is dead),
// mochi drops the old connection, and the old connection's goroutine then
// publishes its Will: for an agent, a retained "offline" on its presence
// topic. That goroutine often runs after the new connection has published
// its "online", so the retained status, and every gateway, would say that a
// connected agent is offline. The client ID is not gone, so its presence
// Will is void: the hook clears it before mochi drops the old connection.
// Wills on other topics keep MQTT's rules (published on takeover).
//
// The race (mochi v2.7.9): on a clean takeover mochi marks the old client
// taken over only after it has unsubscribed it, so the old connection's
// goroutine, ending meanwhile, may still see itself as the session's owner:
// it then deletes the client ID from mochi's client registry, and may take
// the ID's filters out of the topic tree, after the new client has been
// registered (and has subscribed). The new client stays connected but
// receives nothing: mochi delivers only to registered clients. Under load
// one takeover in a few dozen lost the race. So the hook remembers, for each
// replaced connection, the client that replaced it, and once that
// connection has ended (connEnded, from the listener) it registers the
// successor again if the ID has no client, and puts its filters back.
type takeoverHook struct {
	mqtt.HookBase
	srv *mqtt.Server
	log *logrus.Entry

	mu         sync.Mutex
	serving    map[net.Conn]*servedConn  // connections mochi serves now
	successors map[net.Conn]*mqtt.Client // replaced connection, still served -> its successor
}

// servedConn is what the hook knows of a connection mochi serves.
type servedConn struct {
	// presenceWill: its client's Will is the presence topic's, read on
	// the connection's own goroutine at login.
	presenceWill bool
	// ending: its goroutine may now touch the client's Will (a read
	// failed, or the connection is being closed): another goroutine must
	// not any more.
	ending bool
}

// endNotifier is a connection that calls a function once when it starts to
// end: at its first failed Read, or at Close (endConn, wsConn). mochi's
// connection goroutine reaches its client's Will after one of those, with
// one exception: a packet that fails to decode, a handler error, or a
// failed write of an answer mochi sends from the read loop ends the loop
// with no failed Read, and the Will is then read while a takeover may
// clear its flag. That window (such an end of the old connection during
// its takeover) is left: mochi v2.7.9 offers no way to void a Will from
// the goroutine that owns it (OnWill can change a Will, not cancel it, and
// a wildcard filter matches every topic a void Will could be sent to).
type endNotifier interface {
	onEnding(f func())
}

var (
	_ endNotifier = (*endConn)(nil)
	_ endNotifier = (*wsConn)(nil)
)

// endSignal calls f once, when its connection starts to end. f is set
// while the listener may already close the connection (Close at shutdown).
type endSignal struct {
	f    atomic.Pointer[func()]
	once sync.Once
}

func (e *endSignal) onEnding(f func()) { e.f.Store(&f) }

func (e *endSignal) end() {
	if f := e.f.Load(); f != nil {
		e.once.Do(*f)
	}
}

// endConn is a TCP or TLS connection that tells the takeover hook when it
// starts to end.
type endConn struct {
	net.Conn
	endSignal
}

func (c *endConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.end()
	}
	return n, err
}

// Close tells the takeover hook of the end before anything else: mochi's
// Stop closes the connection before it cancels the context that its read
// loop checks, so the hook hears of it before the loop can end and rewrite
// the client's Will.
func (c *endConn) Close() error {
	c.end()
	return c.Conn.Close()
}

func newTakeoverHook(srv *mqtt.Server, log *logrus.Entry) *takeoverHook {
	return &takeoverHook{srv: srv, log: log,
		serving: make(map[net.Conn]*servedConn), successors: make(map[net.Conn]*mqtt.Client)}
}

func (h *takeoverHook) ID() string { return "toolbus-takeover" }

func (h *takeoverHook) Provides(b byte) bool { return b == mqtt.OnSessionEstablish }

// OnSessionEstablish runs after the new client's login, before mochi's
// inheritClientSession disconnects the old one, on the new client's
// connection goroutine.
//
// The old client's Will belongs to the old connection's goroutine, which
// rewrites it when the connection ends cleanly and reads it to publish it
// otherwise. So the hook reads the old Will's topic never (it noted at the
// old client's own login whether the Will is a presence Will), and clears
// its flag only while the old connection is not ending: the connection
// says so under h.mu before its goroutine can reach the Will.
func (h *takeoverHook) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	presence := atomic.LoadUint32(&cl.Properties.Will.Flag) == 1 && cl.Properties.Will.TopicName == presenceTopic(string(cl.Properties.Username), cl.ID)
	old, ok := h.srv.Clients.Get(cl.ID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if st := h.serving[cl.Net.Conn]; st != nil {
		st.presenceWill = presence
	}
	if !ok || old == cl {
		return
	}
	h.succeedLocked(old, cl)
	if st := h.serving[old.Net.Conn]; st != nil && st.presenceWill && !st.ending {
		// sendLWT checks the flag atomically before it reads anything else.
		atomic.StoreUint32(&old.Properties.Will.Flag, 0)
	}
}

// succeed records next as the successor of old, if old's connection is
// still being served: only such a connection can race. (A persistent
// session that lost its connection earlier keeps a client whose connection
// has ended, and would never be seen to end again.)
func (h *takeoverHook) succeed(old, next *mqtt.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.succeedLocked(old, next)
}

func (h *takeoverHook) succeedLocked(old, next *mqtt.Client) {
	if _, ok := h.serving[old.Net.Conn]; ok {
		h.successors[old.Net.Conn] = next
	}
}

// replaced reports whether a takeover replaced cl's connection (its
// successor logged in while it was served).
func (h *takeoverHook) replaced(cl *mqtt.Client) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.successors[cl.Net.Conn]
	return ok
}

// connBegan runs before mochi serves conn.
func (h *takeoverHook) connBegan(conn net.Conn) {
	st := &servedConn{}
	if e, ok := conn.(endNotifier); ok {
		e.onEnding(func() {
			h.mu.Lock()
			st.ending = true
			h.mu.Unlock()
		})
	} else {
		st.ending = true // unknown: never touch its Will from elsewhere
	}
	h.mu.Lock()
	h.serving[conn] = st
	h.mu.Unlock()
}

// connEnded runs once mochi is done with conn: if conn was replaced by a
// takeover, it repairs the successor (repairSuccessor).
func (h *takeoverHook) connEnded(conn net.Conn) {
	h.mu.Lock()
	delete(h.serving, conn)
	next := h.successors[conn]
	delete(h.successors, conn)
	h.mu.Unlock()
	if next != nil {
		h.repairSuccessor(next, conn)
	}
}

// repairSuccessor registers next, the successor of the ended connection
// replaced, under its client ID again if the ID has no client, and puts back
// in the topic tree the filters it holds, unless it is gone or was replaced
// in turn. Subscribing a filter the tree has already changes nothing. The
// repair may come before mochi registers next itself (the old connection
// can end while next still logs in): registering it early does no harm.
func (h *takeoverHook) repairSuccessor(next *mqtt.Client, replaced net.Conn) {
	if next.Closed() {
		return
	}
	registered := true
	if cur, ok := h.srv.Clients.Get(next.ID); !ok {
		h.srv.Clients.Add(next)
		registered = false
		// It may have ended meanwhile, its own cleanup already past: a
		// closed client must not stay registered.
		if next.Closed() {
			if cur, ok := h.srv.Clients.Get(next.ID); ok && cur == next {
				h.srv.Clients.Delete(next.ID)
			}
			return
		}
	} else if cur.Net.Conn == replaced {
		return // next still logs in: mochi registers it in a moment
	} else if cur != next {
		// A later login took the ID while next was out of the registry:
		// next missed its takeover. It would stay connected, receiving
		// nothing; end it as the takeover would have. mochi, not knowing
		// next is replaced, then deletes the ID and its filters as it
		// did here: the same repair puts the later login back.
		h.succeed(next, cur)
		_ = h.srv.DisconnectClient(next, packets.ErrSessionTakenOver)
		return
	}
	var back []packets.Subscription
	for _, sub := range next.State.Subscriptions.GetAll() {
		if !h.srv.Topics.Subscribe(next.ID, sub) {
			continue
		}
		// A filter it let go of meanwhile stays gone.
		if _, still := next.State.Subscriptions.Get(sub.Filter); !still {
			h.srv.Topics.Unsubscribe(sub.Filter, next.ID)
			continue
		}
		// Counted as mochi counts a filter it adds to the tree: the
		// UnsubscribeClient of the race counted it out.
		atomic.AddInt64(&h.srv.Info.Subscriptions, 1)
		back = append(back, sub)
	}
	if registered && len(back) == 0 {
		return
	}
	h.log.WithFields(logrus.Fields{"client": next.ID, "reregistered": !registered, "filters": len(back)}).
		Warn("repaired a session takeover: the replaced connection had removed its successor")
	// An UNSUBSCRIBE of next may have run through the loop above; what it
	// let go of leaves the tree again. (One still between its tree and its
	// state could keep a filter: the window is a few instructions wide.)
	for _, sub := range back {
		if _, still := next.State.Subscriptions.Get(sub.Filter); !still {
			h.srv.Topics.Unsubscribe(sub.Filter, next.ID)
		}
	}
}
