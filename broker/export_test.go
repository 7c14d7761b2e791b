package broker

import (
	mqtt "github.com/mochi-mqtt/server/v2"
)

// AddHook adds a mochi hook to the running broker.
func (b *Broker) AddHook(h mqtt.Hook) error { return b.srv.AddHook(h, nil) }

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
	for filter := range cl.State.Subscriptions.GetAll() {
		b.srv.Topics.Unsubscribe(filter, clientID)
	}
	b.srv.Clients.Delete(clientID)
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

// InlineTreeMatches reports whether mochi's topic tree holds an inline
// client's filter that matches topic (the InlineBus keeps direct filters
// out of it).
func (b *Broker) InlineTreeMatches(topic string) bool {
	return len(b.srv.Topics.Subscribers(topic).InlineSubscriptions) > 0
}

// PreAuthWaiting is how many connections wait to log in, from src (a
// source key, as netsrc.Key gives) or, for "", in all.
func (b *Broker) PreAuthWaiting(src string) int {
	if src == "" {
		return b.preauth.waiting()
	}
	b.preauth.mu.Lock()
	defer b.preauth.mu.Unlock()
	if q := b.preauth.bySource[src]; q != nil {
		return q.len()
	}
	return 0
}
