package broker

import (
	"container/list"
	"net"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/toolbus/toolbus/internal/netsrc"
)

// preauth bounds the connections that have not logged in yet, across the
// broker's listeners: at most max in all and perSource from one source (an
// IPv4 address, an IPv6 /64: netsrc.Key). Such a connection holds its place
// until it logs in, or ConnectTimeout closes it. Without a budget of its
// own, a flood of connections that never send CONNECT filled the
// listeners' connection cap and locked out every client trying to log in.
//
// A new connection is always let in. When the budget (in all, or of its
// source) is spent, the connection that has waited longest is closed to
// make room, one that has not even sent CONNECT before one whose login
// has begun. Refusing the newest instead let a few addresses that hold
// their sockets open lock out every client, one whose login the cache
// knows included; now a client that logs in promptly is closed only if
// the budget turns over entirely while it logs in, and silent sockets
// never close a login under way while any of them is left.
type preauth struct {
	max, perSource int

	mu       sync.Mutex
	all      waitQueue
	conns    map[net.Conn]*waiter
	bySource map[string]*waitQueue
}

// waiter is one connection waiting to log in.
type waiter struct {
	c       net.Conn
	src     string
	started bool // its CONNECT came: its login is under way
	// Its places in the preauth's queue and in its source's.
	inAll, inSource *list.Element
}

// waitQueue holds waiters oldest first: those whose login has not begun,
// and those whose login has.
type waitQueue struct {
	silent, started list.List
}

func (q *waitQueue) len() int { return q.silent.Len() + q.started.Len() }

// oldest is the waiter to close first.
func (q *waitQueue) oldest() *waiter {
	if e := q.silent.Front(); e != nil {
		return e.Value.(*waiter)
	}
	if e := q.started.Front(); e != nil {
		return e.Value.(*waiter)
	}
	return nil
}

func (q *waitQueue) remove(w *waiter, e *list.Element) {
	if w.started {
		q.started.Remove(e)
	} else {
		q.silent.Remove(e)
	}
}

func newPreauth(max, perSource int) *preauth {
	return &preauth{max: max, perSource: perSource, conns: make(map[net.Conn]*waiter), bySource: make(map[string]*waitQueue)}
}

// enter counts c as waiting to log in. When that overspends the budget, in
// all or of c's source, it stops counting the connections that have waited
// longest and returns them: the caller closes them (outside its locks; a
// TLS close may write).
func (p *preauth) enter(c net.Conn) (evicted []net.Conn) {
	src := ""
	if a := c.RemoteAddr(); a != nil {
		src = netsrc.Key(a.String())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.bySource[src]
	if q == nil {
		q = &waitQueue{}
		p.bySource[src] = q
	}
	if q.len() >= p.perSource {
		if w := q.oldest(); w != nil {
			p.removeLocked(w)
			evicted = append(evicted, w.c)
		}
	}
	if p.all.len() >= p.max {
		if w := p.all.oldest(); w != nil {
			p.removeLocked(w)
			evicted = append(evicted, w.c)
		}
	}
	q = p.bySource[src] // removeLocked may have dropped it
	if q == nil {
		q = &waitQueue{}
		p.bySource[src] = q
	}
	w := &waiter{c: c, src: src}
	w.inAll = p.all.silent.PushBack(w)
	w.inSource = q.silent.PushBack(w)
	p.conns[c] = w
	return evicted
}

// started notes that c's CONNECT came: closed only after every silent one.
func (p *preauth) started(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.conns[c]
	if !ok || w.started {
		return
	}
	q := p.bySource[w.src]
	p.all.silent.Remove(w.inAll)
	q.silent.Remove(w.inSource)
	w.started = true
	w.inAll = p.all.started.PushBack(w)
	w.inSource = q.started.PushBack(w)
}

// leave stops counting c: it logged in, or it is gone. Calling it again
// changes nothing.
func (p *preauth) leave(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.conns[c]; ok {
		p.removeLocked(w)
	}
}

func (p *preauth) removeLocked(w *waiter) {
	delete(p.conns, w.c)
	p.all.remove(w, w.inAll)
	q := p.bySource[w.src]
	q.remove(w, w.inSource)
	if q.len() == 0 {
		delete(p.bySource, w.src)
	}
}

// waiting is how many connections wait to log in.
func (p *preauth) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// preauthHook tells the budget when a client's login begins and when it
// has logged in. It is added before the ACL hook, whose OnConnect runs
// the login.
type preauthHook struct {
	mqtt.HookBase
	p *preauth
}

func (h *preauthHook) ID() string { return "toolbus-preauth" }

func (h *preauthHook) Provides(b byte) bool {
	return b == mqtt.OnConnect || b == mqtt.OnSessionEstablish
}

func (h *preauthHook) OnConnect(cl *mqtt.Client, _ packets.Packet) error {
	if cl.Net.Conn != nil {
		h.p.started(cl.Net.Conn)
	}
	return nil
}

func (h *preauthHook) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	if cl.Net.Conn != nil {
		h.p.leave(cl.Net.Conn)
	}
}
