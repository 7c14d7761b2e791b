package broker

import (
	"slices"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// shareHook gives each shared subscription group's messages to its members
// in turn. mochi picks the member its map iteration yields first, which
// loads the instances of one expert agent ($share/<agent>/...) unevenly.
//
// It also passes over members whose connection has ended: mochi publishes a
// client's Will before it marks the client closed and takes its filters out
// of the tree, so a request sent on hearing that an agent went offline could
// otherwise still go to it, and be lost. OnWill marks the client as ending
// first; OnDisconnect, which runs once it is closed, forgets it.
type shareHook struct {
	mqtt.HookBase
	srv    *mqtt.Server
	next   atomic.Uint64
	ending sync.Map // *mqtt.Client -> struct{}: its Will is out, it is not closed yet
}

func (h *shareHook) ID() string { return "toolbus-share" }

func (h *shareHook) Provides(b byte) bool {
	return b == mqtt.OnSelectSubscribers || b == mqtt.OnWill || b == mqtt.OnDisconnect
}

// OnWill marks cl as ending: its Will is about to go out.
func (h *shareHook) OnWill(cl *mqtt.Client, will mqtt.Will) (mqtt.Will, error) {
	h.ending.Store(cl, struct{}{})
	return will, nil
}

// OnDisconnect forgets cl: it is closed by now.
func (h *shareHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) { h.ending.Delete(cl) }

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
			if cl, ok := h.srv.Clients.Get(id); ok && !cl.Closed() && !h.isEnding(cl) {
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

func (h *shareHook) isEnding(cl *mqtt.Client) bool {
	_, ok := h.ending.Load(cl)
	return ok
}
