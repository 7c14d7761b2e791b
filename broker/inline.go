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
// as requester.MessageHandler. It runs on the publisher's goroutine (a
// client's read loop, or the caller of Publish), so it must not block and
// must not call back into the bus: it hands off and returns. The payload is
// the handler's own.
type MessageHandler = func(topic string, payload []byte)

// InlineBus is the broker's in-process client: the gateway's way onto the
// bus without a network hop. It satisfies requester.Bus.
//
// Its subscriptions bypass the ACL (it is the gateway itself). Publishing is
// fire-and-forget: mochi routes the message to every subscriber before
// Publish returns (inline handlers run right there), at Options.InlineQoS.
// A handler may still run once right after Unsubscribe returns, for a
// message that was being routed at the time.
//
// Subscriptions to a context's reply filter (the Requester holds one per
// context: ff/v2/mcp/+/+/<context>/res) or to one exact request or reply
// topic are not given to mochi: they live in replies and direct, and the
// inline hook delivers to them from OnPublished, right after mochi has
// routed the message to everyone else. That is the one way a message
// reaches such a topic: Wills there are refused at login, retained messages
// by the ACL hook's OnPublish. So a context's subscribe and unsubscribe are
// a map operation, and mochi's topic tree, which every publish walks, holds
// only the other wildcard filters however many contexts are open.
type InlineBus struct {
	srv *mqtt.Server
	qos byte

	closed  atomic.Bool
	direct  sync.Map // exact request/reply topic -> MessageHandler
	replies sync.Map // replyKey of a reply filter -> MessageHandler

	mu     sync.Mutex     // serialises Subscribe/Unsubscribe with subs
	subs   map[string]int // filter -> mochi inline subscription ID (directID: in direct)
	nextID int
}

func newInlineBus(srv *mqtt.Server, qos byte) *InlineBus {
	return &InlineBus{srv: srv, qos: qos, subs: make(map[string]int)}
}

// expired takes the filters of an expired session out of the tree: mochi
// (v2.7.9) deletes the client and leaves its filters in the tree, where
// they would hold memory for good, match publishes for nobody, and be
// delivered to a later client of the same ID (docs/upstream.md).
func (b *InlineBus) expired(cl *mqtt.Client) {
	if cur, ok := b.srv.Clients.Get(cl.ID); ok && cur != cl {
		return // the ID is another client's now, and so are the filters
	}
	b.srv.UnsubscribeClient(cl)
}

// directID marks in InlineBus.subs a filter held in direct; mochi's IDs
// start at 1.
const directID = 0

// isDirectFilter reports whether filter is one exact request or reply
// topic, or a context's reply filter: a filter the InlineBus keeps to
// itself.
func isDirectFilter(filter string) bool {
	return isContextTopic(filter) && (!strings.ContainsAny(filter, "+#") || isReplyFilter(filter))
}

// deliverDirect hands a message on topic to the direct subscription of
// topic and to the reply filter that matches it, if there are any.
func (b *InlineBus) deliverDirect(topic string, payload []byte) {
	if h, ok := b.direct.Load(topic); ok {
		h.(MessageHandler)(topic, bytes.Clone(payload))
	}
	if key, ok := replyKey(topic); ok {
		if h, ok := b.replies.Load(key); ok {
			h.(MessageHandler)(topic, bytes.Clone(payload))
		}
	}
}

// directMap is the map that holds a direct filter, and its key there.
func (b *InlineBus) directMap(filter string) (*sync.Map, string) {
	if isReplyFilter(filter) {
		key, _ := replyKey(filter)
		return &b.replies, key
	}
	return &b.direct, filter
}

// inlineHook delivers published messages to the InlineBus's direct
// subscriptions, and cleans up after expired sessions. mochi calls
// OnPublished after routing a publish that the ACL and every OnPublish let
// through (an ignored one is flagged), from the publisher's goroutine:
// where it calls the inline handlers too.
type inlineHook struct {
	mqtt.HookBase
	bus *InlineBus
}

func (h *inlineHook) ID() string { return "toolbus-inline" }

func (h *inlineHook) Provides(b byte) bool {
	return b == mqtt.OnPublished || b == mqtt.OnClientExpired
}

// OnClientExpired forgets an expired session's filters (InlineBus.expired).
func (h *inlineHook) OnClientExpired(cl *mqtt.Client) { h.bus.expired(cl) }

func (h *inlineHook) OnPublished(_ *mqtt.Client, pk packets.Packet) {
	if !pk.Ignore {
		h.bus.deliverDirect(pk.TopicName, pk.Payload)
	}
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
	if isDirectFilter(filter) {
		m, key := b.directMap(filter)
		m.Store(key, h)
		b.subs[filter] = directID
		// None are expected here (see InlineBus), but deliver any as mochi
		// would.
		for _, pk := range b.srv.Topics.Messages(filter) {
			h(pk.TopicName, bytes.Clone(pk.Payload))
		}
		return nil
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
	if id == directID {
		m, key := b.directMap(filter)
		m.Delete(key)
		delete(b.subs, filter)
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

// PublishWaits reports false: Publish routes the message to the
// subscribers, handing it to network clients' write queues (mochi drops it
// for a client whose queue is full), and returns, so a caller need not
// bound it with a deadline.
func (b *InlineBus) PublishWaits() bool { return false }

func (b *InlineBus) subscribed(filter string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.subs[filter]
	return ok
}

func (b *InlineBus) close() { b.closed.Store(true) }
