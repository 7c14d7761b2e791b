package requester

import "context"

// Bus is the MQTT connection a Requester talks through: the embedded broker's
// inline client (broker.InlineBus) or a paho client to an external broker
// (PahoBus).
type Bus interface {
	// Subscribe subscribes to filter and returns once the broker has
	// accepted the subscription, so that a reply to a request published
	// after it returns is delivered. Messages matching filter go to h.
	Subscribe(ctx context.Context, filter string, h MessageHandler) error
	// Unsubscribe removes the subscription to filter.
	Unsubscribe(ctx context.Context, filter string) error
	// Publish sends payload to topic (not retained).
	Publish(ctx context.Context, topic string, payload []byte) error
}

// MessageHandler receives one message from a Bus. It runs on the bus's
// delivery goroutine (for the inline bus, the publisher's own goroutine), so
// it must not block and must not call back into the Bus: it only hands off.
// The payload is owned by the handler from then on.
type MessageHandler = func(topic string, payload []byte)

// LinkWatcher is a Bus whose link to the broker can drop and come back
// (PahoBus). Messages sent while it is down are lost (the session is clean),
// so a Requester over such a bus fails its open calls when the link drops,
// instead of letting them wait for their deadline, and forgets what it heard
// of agent presence when it comes back (the retained statuses arrive again).
type LinkWatcher interface {
	// OnLink registers lost, run once each time the link drops (with the
	// cause), and up, run each time it is back, before the bus subscribes
	// anything again. Both run on the bus's own goroutines with no lock
	// held, and must not block or call back into the Bus. Either may be
	// nil. stop unregisters them.
	OnLink(lost func(cause error), up func()) (stop func())
}

// RefusalWatcher is a Bus that can lose a subscription while its link
// stays up: one the broker refused when the bus made it again after a
// reconnect (PahoBus).
type RefusalWatcher interface {
	// OnRefused registers f, run with each filter the bus could not
	// subscribe again. A context's reply filter is then forgotten by the
	// bus (subscribe it again to use it); any other filter the bus keeps
	// trying, with backoff, while the link lasts. f runs on a goroutine
	// of the bus with no lock held, and must not block or call back into
	// the Bus. stop unregisters it.
	OnRefused(f func(filter string, err error)) (stop func())
}
