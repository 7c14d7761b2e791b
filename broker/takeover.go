package broker

import (
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// takeoverHook keeps a client ID's presence Will from outliving a takeover.
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
type takeoverHook struct {
	mqtt.HookBase
	srv *mqtt.Server
}

func (h *takeoverHook) ID() string { return "toolbus-takeover" }

func (h *takeoverHook) Provides(b byte) bool { return b == mqtt.OnSessionEstablish }

// OnSessionEstablish runs after the new client's login, before mochi's
// inheritClientSession disconnects the old one.
func (h *takeoverHook) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	old, ok := h.srv.Clients.Get(cl.ID)
	if !ok || old == cl || atomic.LoadUint32(&old.Properties.Will.Flag) == 0 {
		return
	}
	if old.Properties.Will.TopicName == presenceTopic(cl.ID) {
		// sendLWT checks the flag atomically before it reads anything else.
		atomic.StoreUint32(&old.Properties.Will.Flag, 0)
	}
}
