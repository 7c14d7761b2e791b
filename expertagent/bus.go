package expertagent

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
