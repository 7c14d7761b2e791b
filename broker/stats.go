package broker

import "sync/atomic"

// Stats are the embedded broker's counters (mochi's own), for metrics.
type Stats struct {
	ClientsConnected int64 // network clients connected now
	Subscriptions    int64 // subscriptions in mochi's tree (the gateway's direct ones are not)
	Inflight         int64 // QoS 1/2 messages waiting for their acknowledgement
	MessagesReceived int64 // PUBLISH packets received since start
	MessagesSent     int64 // PUBLISH packets sent to network clients since start
	MessagesDropped  int64 // messages dropped for a subscriber too slow to take them
	BytesReceived    int64
	BytesSent        int64
}

// Stats returns the broker's counters.
func (b *Broker) Stats() Stats {
	i := b.srv.Info
	return Stats{
		ClientsConnected: atomic.LoadInt64(&i.ClientsConnected),
		Subscriptions:    atomic.LoadInt64(&i.Subscriptions),
		Inflight:         atomic.LoadInt64(&i.Inflight),
		MessagesReceived: atomic.LoadInt64(&i.MessagesReceived),
		MessagesSent:     atomic.LoadInt64(&i.MessagesSent),
		MessagesDropped:  atomic.LoadInt64(&i.MessagesDropped),
		BytesReceived:    atomic.LoadInt64(&i.BytesReceived),
		BytesSent:        atomic.LoadInt64(&i.BytesSent),
	}
}
