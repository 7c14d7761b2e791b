package broker

import (
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/toolbus/toolbus/acl"
)

// identities remembers the identity each client logged in as, for the ACL
// checks that follow. It is keyed by the mochi client, not the client ID: a
// session takeover creates a new client with the same ID, and the old one's
// disconnect must not forget the new one's identity.
//
// An entry lives as long as the client's session: a client whose session
// outlives its connection (clean session off) still receives (queued) QoS
// 1/2 messages, and each of them is checked against its identity. mochi
// forgets a session through one of OnDisconnect (clean), the takeover by a
// new connection, or OnClientExpired; a few failure paths skip all of them,
// and prune catches those.
type identities struct {
	m       sync.Map // *mqtt.Client -> *acl.Identity
	n       atomic.Int64
	pruneAt atomic.Int64 // prune when n passes this
}

const minPruneAt = 64

func (r *identities) get(cl *mqtt.Client) (*acl.Identity, bool) {
	v, ok := r.m.Load(cl)
	if !ok {
		return nil, false
	}
	return v.(*acl.Identity), true
}

func (r *identities) put(cl *mqtt.Client, id acl.Identity) {
	if _, loaded := r.m.Swap(cl, &id); !loaded {
		r.n.Add(1)
	}
}

func (r *identities) forget(cl *mqtt.Client) {
	if _, ok := r.m.LoadAndDelete(cl); ok {
		r.n.Add(-1)
	}
}

func (r *identities) len() int { return int(r.n.Load()) }

// maybePrune drops the entries for which stale reports true, once the map
// has doubled since the last prune, so that its cost stays amortised O(1)
// per login.
func (r *identities) maybePrune(stale func(*mqtt.Client) bool) {
	n := r.n.Load()
	at := r.pruneAt.Load()
	if n < max(at, minPruneAt) || !r.pruneAt.CompareAndSwap(at, 2*n) {
		return
	}
	r.m.Range(func(k, _ any) bool {
		if cl := k.(*mqtt.Client); stale(cl) {
			r.forget(cl)
		}
		return true
	})
	r.pruneAt.Store(max(2*r.n.Load(), minPruneAt))
}
