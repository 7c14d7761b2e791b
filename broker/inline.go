package broker

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// MessageHandler receives a message on the InlineBus: the same function type
// as expertagent.MessageHandler. It runs on the publisher's goroutine (a
// client's read loop, or the caller of Publish), so it must not block and
// must not call back into the bus: it hands off and returns. The payload is
// the handler's own.
type MessageHandler = func(topic string, payload []byte)

// InlineBus is the broker's in-process client: the gateway's way onto the
// bus without a network hop. It satisfies expertagent.Bus.
//
// Its subscriptions bypass the ACL (it is the gateway itself). Publishing is
// fire-and-forget: mochi routes the message to every subscriber before
// Publish returns (inline handlers run right there), at Options.InlineQoS.
// A handler may still run once right after Unsubscribe returns, for a
// message that was being routed at the time.
type InlineBus struct {
	srv *mqtt.Server
	qos byte

	closed atomic.Bool

	mu     sync.Mutex     // serialises Subscribe/Unsubscribe with subs
	subs   map[string]int // filter -> mochi inline subscription ID
	nextID int
}

func newInlineBus(srv *mqtt.Server, qos byte) *InlineBus {
	return &InlineBus{srv: srv, qos: qos, subs: make(map[string]int)}
}

// Subscribe subscribes to filter; messages matching it go to h. It returns
// once the subscription is in place: a message published after that is
// delivered. Retained messages matching filter are delivered to h before it
// returns. Subscribing again to the same filter replaces the handler.
// Shared ("$share/...") filters are refused: the inline client is one
// subscriber, and mochi would not treat the prefix as a share anyway.
func (b *InlineBus) Subscribe(ctx context.Context, filter string, h MessageHandler) error {
	if h == nil {
		return fmt.Errorf("inline subscribe %q: nil handler", filter)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inline subscribe %q: %w", filter, err)
	}
	if !mqtt.IsValidFilter(filter, false) || mqtt.IsSharedFilter(filter) {
		return fmt.Errorf("inline subscribe %q: %w", filter, ErrInvalidFilter)
	}
	deliver := func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		// The packet's payload is shared with the other inline handlers
		// (and, for Publish, is the publisher's own slice).
		h(pk.TopicName, bytes.Clone(pk.Payload))
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return fmt.Errorf("inline subscribe %q: %w", filter, ErrClosed)
	}
	id, ok := b.subs[filter]
	if !ok {
		// IDs must be unique across filters: mochi gathers the inline
		// handlers matching a topic into one map keyed by ID.
		b.nextID++
		id = b.nextID
	}
	if err := b.srv.Subscribe(filter, id, deliver); err != nil {
		return fmt.Errorf("inline subscribe %q: %w", filter, err)
	}
	b.subs[filter] = id
	return nil
}

// Unsubscribe removes the subscription to filter. Unsubscribing from a
// filter the bus does not hold is not an error.
func (b *InlineBus) Unsubscribe(ctx context.Context, filter string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inline unsubscribe %q: %w", filter, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return fmt.Errorf("inline unsubscribe %q: %w", filter, ErrClosed)
	}
	id, ok := b.subs[filter]
	if !ok {
		return nil
	}
	if err := b.srv.Unsubscribe(filter, id); err != nil {
		return fmt.Errorf("inline unsubscribe %q: %w", filter, err)
	}
	delete(b.subs, filter)
	return nil
}

// Publish sends payload to topic, not retained. The payload is not kept:
// the caller may reuse it when Publish returns.
func (b *InlineBus) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inline publish %q: %w", topic, err)
	}
	// The inline client skips mochi's topic validation.
	if topic == "" || strings.HasPrefix(topic, "$") || !mqtt.IsValidFilter(topic, true) {
		return fmt.Errorf("inline publish %q: %w", topic, ErrInvalidTopic)
	}
	if b.closed.Load() {
		return fmt.Errorf("inline publish %q: %w", topic, ErrClosed)
	}
	if err := b.srv.Publish(topic, payload, false, b.qos); err != nil {
		return fmt.Errorf("inline publish %q: %w", topic, err)
	}
	return nil
}

func (b *InlineBus) subscribed(filter string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.subs[filter]
	return ok
}

func (b *InlineBus) close() { b.closed.Store(true) }
