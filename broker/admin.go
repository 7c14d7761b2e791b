package broker

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// ClientInfo is one connected MQTT client, as operators see it.
type ClientInfo struct {
	ClientID        string
	Username        string
	Remote          string // the peer's address
	Listener        string // "tcp", "tls" or "ws"
	ProtocolVersion byte   // 3, 4 (MQTT 3.1.1) or 5
	CleanSession    bool
	// ConnectedSince is when the client's login completed; zero if the
	// broker has not recorded it (a login finishing at this very moment).
	ConnectedSince time.Time
}

// Clients lists the connected MQTT clients (not the inline client, not
// sessions kept for disconnected clients), ordered by client ID.
func (b *Broker) Clients() []ClientInfo {
	var out []ClientInfo
	for _, cl := range b.srv.Clients.GetAll() { // one read lock (see connTracker.disconnectClients)
		if cl.Net.Inline || cl.Closed() {
			continue
		}
		out = append(out, ClientInfo{
			ClientID:        cl.ID,
			Username:        string(cl.Properties.Username),
			Remote:          cl.Net.Remote,
			Listener:        cl.Net.Listener,
			ProtocolVersion: cl.Properties.ProtocolVersion,
			CleanSession:    cl.Properties.Clean,
			ConnectedSince:  b.clock.since(cl),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClientID < out[j].ClientID })
	return out
}

// Disconnect disconnects every connected client logged in as username (an
// MQTT 5 client hears "not authorized"; each one's Will is published, as
// for any connection the broker closes) and returns how many there were.
// It does not stop them logging in again: disable or remove the identity
// in the store first, then call Disconnect.
//
// A login that passed its password check just before the identity changed
// and completes while Disconnect runs can slip through; calling Disconnect
// again catches it (and may count again a client still on its way out).
func (b *Broker) Disconnect(username string) int {
	n := 0
	for _, cl := range b.srv.Clients.GetAll() {
		if cl.Net.Inline || cl.Closed() || string(cl.Properties.Username) != username {
			continue
		}
		disconnect(cl, packets.ErrNotAuthorized)
		n++
	}
	if n > 0 {
		b.log.WithField("username", username).WithField("clients", n).Info("disconnected the clients of an identity")
	}
	return n
}

// connClock is a mochi hook that remembers when each client logged in, for
// Clients: mochi keeps no such time itself.
//
// The time is taken in OnSessionEstablish, before mochi adds the client to
// its list and answers CONNACK, so that a client that can be listed (or has
// heard CONNACK) has its time. mochi skips OnDisconnect when CONNACK cannot
// be written, so entries of closed clients are also pruned, amortised over
// logins.
type connClock struct {
	mqtt.HookBase
	m       sync.Map // *mqtt.Client -> time.Time
	n       atomic.Int64
	pruneAt atomic.Int64
}

func (h *connClock) ID() string { return "toolbus-conn-clock" }

func (h *connClock) Provides(b byte) bool {
	return b == mqtt.OnSessionEstablish || b == mqtt.OnDisconnect
}

func (h *connClock) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	if _, loaded := h.m.Swap(cl, time.Now()); !loaded {
		h.n.Add(1)
	}
	h.maybePrune()
}

func (h *connClock) OnDisconnect(cl *mqtt.Client, _ error, _ bool) { h.forget(cl) }

func (h *connClock) forget(cl *mqtt.Client) {
	if _, ok := h.m.LoadAndDelete(cl); ok {
		h.n.Add(-1)
	}
}

// maybePrune drops the entries of closed clients once the map has doubled
// since the last prune.
func (h *connClock) maybePrune() {
	n, at := h.n.Load(), h.pruneAt.Load()
	if n < max(at, minPruneAt) || !h.pruneAt.CompareAndSwap(at, 2*n) {
		return
	}
	h.m.Range(func(k, _ any) bool {
		if cl := k.(*mqtt.Client); cl.Closed() {
			h.forget(cl)
		}
		return true
	})
	h.pruneAt.Store(max(2*h.n.Load(), minPruneAt))
}

func (h *connClock) since(cl *mqtt.Client) time.Time {
	if h == nil {
		return time.Time{}
	}
	if v, ok := h.m.Load(cl); ok {
		return v.(time.Time)
	}
	return time.Time{}
}
