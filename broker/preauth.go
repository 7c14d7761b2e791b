package broker

import (
	"net"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// preauth bounds the connections that have not logged in yet, across the
// broker's listeners: at most max in all and perSource from one IP
// address. Such a connection holds its place until it logs in or
// ConnectTimeout closes it. Without a budget of its own, a flood of
// connections that never send CONNECT filled the listeners' connection cap
// and locked out every client trying to log in; now they can take at most
// max places of it, and one source at most perSource.
type preauth struct {
	max, perSource int

	mu       sync.Mutex
	conns    map[net.Conn]string // waiting to log in → its source
	bySource map[string]int
}

func newPreauth(max, perSource int) *preauth {
	return &preauth{max: max, perSource: perSource, conns: make(map[net.Conn]string), bySource: make(map[string]int)}
}

// enter counts c as waiting to log in, or reports false when the budget
// (in all, or of c's source) is spent.
func (p *preauth) enter(c net.Conn) bool {
	src := sourceOf(c)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) >= p.max || p.bySource[src] >= p.perSource {
		return false
	}
	p.conns[c] = src
	p.bySource[src]++
	return true
}

// leave stops counting c: it logged in, or it is gone. Calling it again
// changes nothing.
func (p *preauth) leave(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	src, ok := p.conns[c]
	if !ok {
		return
	}
	delete(p.conns, c)
	if p.bySource[src]--; p.bySource[src] <= 0 {
		delete(p.bySource, src)
	}
}

// waiting is how many connections wait to log in.
func (p *preauth) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// sourceOf is c's remote IP address (its whole address if it has no IP).
func sourceOf(c net.Conn) string {
	addr := c.RemoteAddr()
	if addr == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		return host
	}
	return addr.String()
}

// preauthHook tells the budget when a client has logged in.
type preauthHook struct {
	mqtt.HookBase
	p *preauth
}

func (h *preauthHook) ID() string { return "toolbus-preauth" }

func (h *preauthHook) Provides(b byte) bool { return b == mqtt.OnSessionEstablish }

func (h *preauthHook) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	if cl.Net.Conn != nil {
		h.p.leave(cl.Net.Conn)
	}
}
