package broker

import (
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// AddHook adds a mochi hook to the running broker.
func (b *Broker) AddHook(h mqtt.Hook) error { return b.srv.AddHook(h, nil) }

// RequestReceivers is the request route's receivers (client IDs) for the
// current subscriptions: empty when requests take mochi's way.
func (b *Broker) RequestReceivers() []string { return b.bus.requestRoute().members }

// RepliesRouted reports whether replies go through mochi's topic tree: true
// while some filter there may match a response topic.
func (b *Broker) RepliesRouted() bool { return b.bus.res.on.Load() }

// LoseTakeoverRace does to clientID what the replaced connection's
// goroutine does when it loses mochi's clean takeover race: it deletes the
// ID from the client registry and its filters from the topic tree. The
// returned repair runs the takeover hook's repair for the client that held
// the ID.
func (b *Broker) LoseTakeoverRace(clientID string) (repair func()) {
	cl, ok := b.srv.Clients.Get(clientID)
	if !ok {
		return func() {}
	}
	var filters []packets.Subscription
	for filter, sub := range cl.State.Subscriptions.GetAll() {
		b.srv.Topics.Unsubscribe(filter, clientID)
		filters = append(filters, sub)
	}
	b.srv.Clients.Delete(clientID)
	for _, w := range b.bus.watches() {
		w.unsubscribed(cl, packets.Packet{Filters: filters}) // as mochi's OnUnsubscribed would
	}
	b.bus.subscriptionsChanged()
	return func() { b.takeover.repairSuccessor(cl, nil) }
}

// Registered reports whether clientID is in mochi's client registry.
func (b *Broker) Registered(clientID string) bool {
	_, ok := b.srv.Clients.Get(clientID)
	return ok
}

// PendingTakeovers is how many replaced connections the takeover hook
// still waits to see end.
func (b *Broker) PendingTakeovers() int {
	b.takeover.mu.Lock()
	defer b.takeover.mu.Unlock()
	return len(b.takeover.successors)
}

// TreeMatches reports whether mochi's topic tree holds a filter of
// clientID that matches topic.
func (b *Broker) TreeMatches(clientID, topic string) bool {
	_, ok := b.srv.Topics.Subscribers(topic).Subscriptions[clientID]
	return ok
}
