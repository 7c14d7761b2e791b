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
//
// Subscriptions to one exact request or response topic (the Requester holds
// one per context) are not given to mochi: they live in direct, and the
// inline hook delivers to them from OnPublished, right after mochi has
// routed the message to everyone else. That is the one way a message
// reaches such a topic: Wills there are refused at login, retained messages
// by OnPublish. mochi's topic tree then holds only the wildcard filters,
// which halves what every publish spends walking it, and a context's
// subscribe and unsubscribe cost a map operation.
//
// A request goes straight to the expert agent's socket while the agents'
// subscriptions allow (reqroute.go).
//
// A reply (a response topic) usually has no subscriber but the bus: no
// expert agent may read responses, and operator rules cannot reach them.
// While no filter that could match a response topic is in mochi's tree (a
// platform identity connected over TCP puts one there, until it
// unsubscribes or goes), the inline hook hands replies to the direct
// subscription from OnPublish and tells mochi not to route them at all,
// which spares a walk of the tree per tool call.
type InlineBus struct {
	srv *mqtt.Server
	qos byte

	closed atomic.Bool
	direct sync.Map // exact request/response topic -> MessageHandler
	// res follows the filters that may match a response topic: while one
	// is in mochi's tree, or on its way there, replies are routed by mochi.
	res *filterWatch

	mu     sync.Mutex     // serialises Subscribe/Unsubscribe with subs
	subs   map[string]int // filter -> mochi inline subscription ID (directID: in direct)
	nextID int

	// The request route (reqroute.go).
	allowRead func(cl *mqtt.Client, topic string) bool // the ACL's delivery check
	reqGen    atomic.Uint64                            // bumped on every subscription change
	reqMixed  *filterWatch                             // filters that match some request topics only: no route
	route     atomic.Pointer[reqRoute]
	routeMu   sync.Mutex    // serialises working out the route
	rr        atomic.Uint64 // round robin over a shared group's members
}

// newInlineBus returns the bus of srv; allowRead is the ACL's check of a
// delivery to a network client.
func newInlineBus(srv *mqtt.Server, qos byte, allowRead func(cl *mqtt.Client, topic string) bool) *InlineBus {
	b := &InlineBus{srv: srv, qos: qos, subs: make(map[string]int), allowRead: allowRead}
	b.res = newFilterWatch(mayMatchResponse, b.stillSubscribed)
	b.reqMixed = newFilterWatch(func(f string) bool { return matchKind(f, requestFilterLevels) == matchesSome }, b.stillSubscribed)
	return b
}

// watches are the bus's filter watches, each turning a shortcut off.
func (b *InlineBus) watches() [2]*filterWatch { return [2]*filterWatch{b.res, b.reqMixed} }

// restored hears of filters the takeover repair put back in the tree
// without mochi's hooks (takeoverHook.repairSuccessor): the watches record
// those cl still holds and forget cl's others, and the request route looks
// again.
func (b *InlineBus) restored(cl *mqtt.Client, subs []packets.Subscription) {
	for _, w := range b.watches() {
		w.restored(cl, subs)
	}
	b.subscriptionsChanged()
}

// restoring turns on, until done, every watch that one of subs would
// turn on: the takeover repair puts them back in the tree before it tells
// restored which stayed.
func (b *InlineBus) restoring(subs []packets.Subscription) (done func()) {
	pk := packets.Packet{Filters: subs}
	var pending [2]int
	for i, w := range b.watches() {
		pending[i] = w.subscribing(pk)
	}
	return func() {
		for i, w := range b.watches() {
			w.unpend(pending[i])
		}
	}
}

// expired takes the filters of an expired session out of the tree: mochi
// (v2.7.9) deletes the client and leaves its filters in the tree, where
// they would hold memory for good, match publishes for nobody, and be
// delivered to a later client of the same ID on mochi's path but not on
// the request route. mochi's UnsubscribeClient does it, and its
// OnUnsubscribed updates the watches and the route.
func (b *InlineBus) expired(cl *mqtt.Client) {
	if cur, ok := b.srv.Clients.Get(cl.ID); ok && cur != cl {
		return // the ID is another client's now, and so are the filters
	}
	b.srv.UnsubscribeClient(cl)
}

// stillSubscribed reports whether the client with cl's ID holds filter: cl
// itself (an UNSUBSCRIBE refused as "in use"), or the client that took its
// session over.
func (b *InlineBus) stillSubscribed(cl *mqtt.Client, filter string) bool {
	if cl.Net.Inline {
		return false // the bus unsubscribes its own filters only when it lets them go
	}
	if _, ok := cl.State.Subscriptions.Get(filter); ok {
		return true
	}
	if cur, ok := b.srv.Clients.Get(cl.ID); ok && cur != cl {
		_, ok := cur.State.Subscriptions.Get(filter)
		return ok
	}
	return false
}

// A filterWatch follows the filters in mochi's tree that pick selects,
// by client, so that a shortcut such a filter would break is off exactly
// while one is in the tree or on its way there: from OnSubscribe (before
// the tree has it and before the SUBACK) until mochi took it out again.
type filterWatch struct {
	pick  func(filter string) bool
	still func(cl *mqtt.Client, filter string) bool // the client with cl's ID holds filter

	on      atomic.Bool // a picked filter is in the tree or on its way
	mu      sync.Mutex  // guards subs and pending; orders the stores to on
	subs    map[watchedSub]struct{}
	pending int // picked filters between OnSubscribe and OnSubscribed
}

// watchedSub is a client's filter in mochi's tree.
type watchedSub struct{ clientID, filter string }

func newFilterWatch(pick func(string) bool, still func(*mqtt.Client, string) bool) *filterWatch {
	return &filterWatch{pick: pick, still: still, subs: make(map[watchedSub]struct{})}
}

// subscribing notes the picked filters of a SUBSCRIBE before mochi adds
// them to the tree (and before the SUBACK), so that nothing published
// after the client learns of its subscription takes the shortcut. It
// returns how many it noted (subscribed, or unpend, ends them).
func (w *filterWatch) subscribing(pk packets.Packet) int {
	n := 0
	for _, f := range pk.Filters {
		if w.pick(f.Filter) {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending += n
	w.on.Store(true)
	return n
}

// subscribed records the granted ones once mochi has answered them.
func (w *filterWatch) subscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, f := range pk.Filters {
		if !w.pick(f.Filter) {
			continue
		}
		w.pending--
		if i < len(reasonCodes) && reasonCodes[i] < packets.ErrUnspecifiedError.Code {
			w.subs[watchedSub{cl.ID, f.Filter}] = struct{}{}
		}
	}
	w.pending = max(w.pending, 0) // a hook that changed the filters between the two calls
	w.changedLocked()
}

// unpend ends n filters that subscribing noted, recording nothing (the
// takeover repair records what it put back through restored).
func (w *filterWatch) unpend(n int) {
	if n == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = max(w.pending-n, 0)
	w.changedLocked()
}

// unsubscribed forgets the filters mochi took out of the tree: all of a
// client's when it goes, or those of an UNSUBSCRIBE that mochi carried out
// (OnUnsubscribed also follows one it refused).
func (w *filterWatch) unsubscribed(cl *mqtt.Client, pk packets.Packet) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range pk.Filters {
		if w.pick(f.Filter) && !w.still(cl, f.Filter) {
			delete(w.subs, watchedSub{cl.ID, f.Filter})
		}
	}
	w.changedLocked()
}

// restored records the picked filters of subs that cl still holds and
// forgets cl's others.
func (w *filterWatch) restored(cl *mqtt.Client, subs []packets.Subscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.subs {
		if k.clientID == cl.ID && !w.still(cl, k.filter) {
			delete(w.subs, k)
		}
	}
	for _, sub := range subs {
		if w.pick(sub.Filter) && w.still(cl, sub.Filter) {
			w.subs[watchedSub{cl.ID, sub.Filter}] = struct{}{}
		}
	}
	w.changedLocked()
}

// changedLocked sets on from pending and subs. Called with mu held, so
// that the stores keep the order of the changes.
func (w *filterWatch) changedLocked() {
	w.on.Store(w.pending > 0 || len(w.subs) > 0)
}

// directID marks in InlineBus.subs a filter held in direct; mochi's IDs
// start at 1.
const directID = 0

// isDirectFilter reports whether filter is one exact request or response
// topic: a filter the InlineBus keeps to itself.
func isDirectFilter(filter string) bool {
	return isContextTopic(filter) && !strings.ContainsAny(filter, "+#")
}

// deliverDirect hands a message on topic to the direct subscription of
// topic, if there is one.
func (b *InlineBus) deliverDirect(topic string, payload []byte) {
	if h, ok := b.direct.Load(topic); ok {
		h.(MessageHandler)(topic, bytes.Clone(payload))
	}
}

// inlineHook delivers published messages to the InlineBus's direct
// subscriptions. mochi calls OnPublished after routing a publish that the
// ACL and every OnPublish let through (an ignored one is flagged), from
// the publisher's goroutine: where it called the inline handlers before.
// Replies take a shorter way, from OnPublish (see InlineBus).
type inlineHook struct {
	mqtt.HookBase
	bus *InlineBus
}

func (h *inlineHook) ID() string { return "toolbus-inline" }

func (h *inlineHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnPublished, mqtt.OnPublish, mqtt.OnSubscribe, mqtt.OnSubscribed, mqtt.OnUnsubscribed, mqtt.OnClientExpired:
		return true
	}
	return false
}

// OnSubscribe notes the filters the watches pick before mochi adds them to
// the tree (filterWatch.subscribing).
func (h *inlineHook) OnSubscribe(_ *mqtt.Client, pk packets.Packet) packets.Packet {
	for _, w := range h.bus.watches() {
		w.subscribing(pk)
	}
	return pk
}

// OnSubscribed records the granted filters the watches pick and tells the
// request route to look again. mochi calls it with the tree updated,
// before the SUBACK.
func (h *inlineHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	for _, w := range h.bus.watches() {
		w.subscribed(cl, pk, reasonCodes)
	}
	h.bus.subscriptionsChanged()
}

// OnUnsubscribed forgets the filters that left the tree and tells the
// request route to look again. mochi calls it for an UNSUBSCRIBE and for
// every filter of a client that goes.
func (h *inlineHook) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	for _, w := range h.bus.watches() {
		w.unsubscribed(cl, pk)
	}
	h.bus.subscriptionsChanged()
}

// OnClientExpired forgets an expired session's filters (InlineBus.expired).
func (h *inlineHook) OnClientExpired(cl *mqtt.Client) { h.bus.expired(cl) }

// OnPublish delivers a reply to the direct subscription and has mochi drop
// it (still acknowledged) while nothing in the tree could want it. It runs
// after the ACL check and after the ACL hook's OnPublish, which refuses
// retained messages here.
func (h *inlineHook) OnPublish(_ *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Retain || h.bus.res.on.Load() || !isResponseTopic(pk.TopicName) {
		return pk, nil
	}
	h.bus.deliverDirect(pk.TopicName, pk.Payload)
	return pk, packets.CodeSuccessIgnore
}

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
		b.direct.Store(filter, h)
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
	// mochi runs the inline hook's OnSubscribe and OnSubscribed for the
	// bus's own subscriptions too: the watches and the request route hear of
	// this one there (and of its Unsubscribe in OnUnsubscribed).
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
		b.direct.Delete(filter)
		delete(b.subs, filter)
		return nil
	}
	if err := b.srv.Unsubscribe(filter, id); err != nil { // OnUnsubscribed: the route looks again
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
	if isRequestTopic(topic) {
		if done, err := b.publishRequest(topic, payload); done {
			if err != nil {
				return fmt.Errorf("inline publish %q: %w", topic, err)
			}
			return nil
		}
	}
	if err := b.srv.Publish(topic, payload, false, b.qos); err != nil {
		return fmt.Errorf("inline publish %q: %w", topic, err)
	}
	return nil
}

// PublishWaits reports false: Publish routes the message to the
// subscribers (handing it to network clients' write queues, or writing a
// request to the agent's socket) and returns, so a caller need not bound it
// with a deadline. The one wait is a request write to an agent whose socket
// buffer is full, at most queuedWriteTimeout (10 s) before its connection
// is closed.
func (b *InlineBus) PublishWaits() bool { return false }

func (b *InlineBus) subscribed(filter string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.subs[filter]
	return ok
}

func (b *InlineBus) close() { b.closed.Store(true) }
