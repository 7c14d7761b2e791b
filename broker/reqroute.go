package broker

import (
	"slices"
	"sync/atomic"

	"github.com/mochi-mqtt/server/v2/packets"
)

// The request route: how the InlineBus hands a request to the expert agent
// without mochi's publish machinery.
//
// mochi routes every publish the same way: it walks its topic tree, builds
// maps of the matching subscribers, picks one member of each shared group,
// copies the packet per subscriber and queues it for the subscriber's write
// goroutine. For the gateway's requests that work gives the same answer
// every time: agents subscribe to ff/v1/mcp/+/+/+/+/+/req (plain or shared,
// as the contract says), a filter that matches every request topic alike.
// So while every filter in the tree that matches a request topic matches
// all of them (none names a context level), the set of subscribers is the
// same for every request topic, and it is worked out once, and again only
// after a subscription changes. With one receiver (one agent group: the
// usual case), Publish encodes the PUBLISH itself and queues it on the
// agent's connection (ackConn.writeQueued): the caller writes it, unless a
// write is under way or another caller runnable at the same moment writes
// first, which takes it along. No tree walk, no maps, no hand-off to
// another goroutine. Anything else (several groups, a filter
// naming a context level, inline QoS 1, a TLS or WebSocket connection, a
// payload over maxDirectPayload) takes mochi's way; the receivers see the
// same packets either way.

// reqRoute is the receiver of every request topic, as worked out at one
// subscription generation.
type reqRoute struct {
	gen uint64
	// members is the plain subscriber (one) or the members of the one
	// shared group, sorted by client ID; nil: publish through mochi.
	members []string
}

// subscriptionsChanged (from the inline hook) notes a subscription change:
// the next request works out the route again. mochi calls OnSubscribed after the
// tree holds the new subscription and before the SUBACK leaves, and
// OnUnsubscribed after the tree dropped it, so a request published after a
// client learnt of its subscription finds it.
func (b *InlineBus) subscriptionsChanged() { b.reqGen.Add(1) }

// requestRoute returns the route for the current subscriptions.
func (b *InlineBus) requestRoute() *reqRoute {
	gen := b.reqGen.Load()
	if r := b.route.Load(); r != nil && r.gen == gen {
		return r
	}
	b.routeMu.Lock()
	defer b.routeMu.Unlock()
	gen = b.reqGen.Load() // read before the tree: a change after it bumps it again
	if r := b.route.Load(); r != nil && r.gen == gen {
		return r
	}
	r := &reqRoute{gen: gen, members: b.requestReceivers()}
	b.route.Store(r)
	return r
}

// anyRequestTopic is a request topic: the route holds only while every
// request topic has the subscribers this one has.
const anyRequestTopic = "ff/v1/mcp/_/_/_/_/_/req"

// requestReceivers works out the receivers of every request topic from
// mochi's tree: one plain subscriber, or the members of one shared group.
// nil when the route cannot be used.
func (b *InlineBus) requestReceivers() []string {
	if b.qos != 0 {
		return nil // QoS 1 needs mochi's in-flight tracking
	}
	if b.reqMixed.on.Load() {
		return nil // a filter names a context level: requests differ in their receivers
	}
	subs := b.srv.Topics.Subscribers(anyRequestTopic)
	if len(subs.InlineSubscriptions) > 0 || len(subs.Subscriptions)+len(subs.Shared) != 1 {
		return nil
	}
	var members []string
	for id, sub := range subs.Subscriptions {
		if hasIdentifiers(sub) {
			return nil // MQTT 5 subscription identifiers go in the PUBLISH
		}
		members = append(members, id)
	}
	for _, group := range subs.Shared {
		for id, sub := range group {
			if hasIdentifiers(sub) {
				return nil
			}
			members = append(members, id)
		}
	}
	slices.Sort(members)
	return members
}

// hasIdentifiers reports whether a gathered subscription carries an MQTT 5
// subscription identifier. mochi's Subscribers merges every plain
// subscription into one with an Identifiers map, {filter: 0} when there is
// none: only a value above zero is an identifier.
func hasIdentifiers(sub packets.Subscription) bool {
	if sub.Identifier > 0 {
		return true
	}
	for _, id := range sub.Identifiers {
		if id > 0 {
			return true
		}
	}
	return false
}

// publishRequest writes a request straight to its receiver's socket, when
// the route allows; false: it wrote nothing, publish through mochi.
func (b *InlineBus) publishRequest(topic string, payload []byte) (bool, error) {
	if len(payload) > maxDirectPayload {
		return false, nil
	}
	if b.reqMixed.on.Load() {
		// Checked before the route, which is worked out again only once
		// OnSubscribed has bumped reqGen: a filter on its way into the
		// tree counts from OnSubscribe on.
		return false, nil
	}
	r := b.requestRoute()
	if len(r.members) == 0 {
		return false, nil
	}
	id := r.members[0]
	if len(r.members) > 1 {
		id = r.members[b.rr.Add(1)%uint64(len(r.members))]
	}
	cl, ok := b.srv.Clients.Get(id)
	if !ok || cl.Closed() || cl.Net.Inline {
		return false, nil
	}
	conn, ok := cl.Net.Conn.(*ackConn)
	if !ok {
		return false, nil // TLS and WebSocket connections: mochi's way
	}
	if !b.allowRead(cl, topic) {
		return false, nil // mochi refuses the delivery and reports it
	}
	var buf [192]byte // writeQueued copies it: it stays on the stack
	head := appendPublishHead(buf[:0], topic, cl.Properties.ProtocolVersion == 5, len(payload))
	if limit := cl.Properties.Props.MaximumPacketSize; limit > 0 && uint64(len(head)+len(payload)) > uint64(limit) {
		atomic.AddInt64(&b.srv.Info.MessagesDropped, 1) // as mochi: too large for this client
		return true, nil
	}
	if err := conn.writeQueued(head, payload); err != nil {
		return true, err
	}
	atomic.AddInt64(&b.srv.Info.PacketsSent, 1)
	atomic.AddInt64(&b.srv.Info.MessagesSent, 1)
	atomic.AddInt64(&b.srv.Info.BytesSent, int64(len(head)+len(payload)))
	// What mochi's OnPublished would have done.
	b.deliverDirect(topic, payload)
	return true, nil
}

// maxDirectPayload is the largest request written straight to the socket;
// a larger one takes mochi's way, so that queuedWriteTimeout never bounds a
// big write on a slow link.
const maxDirectPayload = 64 << 10

// appendPublishHead appends the fixed and variable header of a QoS 0,
// not retained PUBLISH of topic with a payload of n bytes: MQTT 3.1.1, or
// MQTT 5 with no properties.
func appendPublishHead(dst []byte, topic string, v5 bool, n int) []byte {
	rest := 2 + len(topic) + n
	if v5 {
		rest++ // property length 0
	}
	dst = append(dst, packets.Publish<<4)
	for {
		b := byte(rest & 0x7f)
		rest >>= 7
		if rest > 0 {
			b |= 0x80
		}
		dst = append(dst, b)
		if rest == 0 {
			break
		}
	}
	dst = append(dst, byte(len(topic)>>8), byte(len(topic)))
	dst = append(dst, topic...)
	if v5 {
		dst = append(dst, 0)
	}
	return dst
}
