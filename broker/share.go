package broker

import (
	"slices"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// shareHook gives each shared subscription group's messages to its members
// in turn. mochi picks the member its map iteration yields first, which
// loads the instances of one expert agent ($share/<agent>/...) unevenly.
//
// It also passes over members whose connection has ended: mochi publishes a
// client's Will before it takes the client's filters out of the tree, so a
// request sent on hearing that an agent went offline could otherwise still
// go to it, and be lost.
type shareHook struct {
	mqtt.HookBase
	srv  *mqtt.Server
	next atomic.Uint64
}

func (h *shareHook) ID() string { return "toolbus-share" }

func (h *shareHook) Provides(b byte) bool { return b == mqtt.OnSelectSubscribers }

// OnSelectSubscribers selects one member per group, as mochi's SelectShared
// does, by round robin over the members sorted by client ID.
func (h *shareHook) OnSelectSubscribers(subs *mqtt.Subscribers, _ packets.Packet) *mqtt.Subscribers {
	n := h.next.Add(1)
	subs.SharedSelected = make(map[string]packets.Subscription, len(subs.Shared))
	for _, members := range subs.Shared {
		ids := make([]string, 0, len(members))
		for id := range members {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		live := ids[:0]
		for _, id := range ids {
			if cl, ok := h.srv.Clients.Get(id); ok && !cl.Closed() {
				live = append(live, id)
			}
		}
		if len(live) > 0 {
			ids = live
		}
		id := ids[n%uint64(len(ids))]
		sub := members[id]
		if cur, ok := subs.SharedSelected[id]; ok {
			sub = cur.Merge(sub)
		}
		subs.SharedSelected[id] = sub
	}
	return subs
}
