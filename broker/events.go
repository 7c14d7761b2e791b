package broker

import (
	"fmt"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/toolbus/toolbus/acl"
)

// Kinds of Event.
const (
	EventConnect    = "connect"    // a client logged in and has its session
	EventDisconnect = "disconnect" // a logged-in client's connection ended
	EventDenied     = "denied"     // the ACL refused a publish or a subscription
	// EventLoginRefused: a CONNECT was refused; Err says why (the client
	// only ever hears "bad username or password").
	EventLoginRefused = "login_refused"
)

// Event is something the audit log wants to know of the broker
// (Options.Events). Every string a client chose (ClientID, Username, Topic,
// the text of Err) is cut to a few hundred bytes: MQTT allows 64 KiB each,
// and a client can make refusals as fast as it can send.
type Event struct {
	Time time.Time
	Kind string
	// The client: its ID, the identity it logged in as and that identity's
	// role, and its remote address.
	ClientID, Username string
	Role               acl.Role
	Remote             string
	// Action ("publish" or "subscribe") and Topic (topic name or filter) of
	// an EventDenied.
	Action, Topic string
	// Err is why the connection of an EventDisconnect ended (nil or a
	// normal DISCONNECT when the client left); for an EventDenied of a
	// subscription, the reason code the client got.
	Err error
}

// eventsHook reports logins, disconnects and ACL refusals to
// Options.Events. It is added after the ACL hook, which matters for
// OnACLCheck: mochi asks each hook in turn until one allows, so this hook
// hears only of the checks the ACL hook refused and adds nothing to an
// allowed publish or delivery.
type eventsHook struct {
	mqtt.HookBase

	emit func(Event)
	acl  *aclHook
	// clients holds who each connected client is, from its session on, so
	// that its disconnect can still be told after the ACL hook forgot it.
	clients sync.Map // *mqtt.Client -> *Event (the connect event)
}

func (h *eventsHook) ID() string { return "toolbus-events" }

func (h *eventsHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnSessionEstablished, mqtt.OnDisconnect, mqtt.OnACLCheck, mqtt.OnSubscribed:
		return true
	}
	return false
}

// addEventsHook adds the hook when o.Events is set; without it the broker
// runs exactly as before.
func (b *Broker) addEventsHook() error {
	if b.opts.Events == nil {
		return nil
	}
	return b.srv.AddHook(&eventsHook{emit: b.opts.Events, acl: b.hook}, nil)
}

func (h *eventsHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	if cl.Net.Inline {
		return
	}
	e := Event{Time: time.Now(), Kind: EventConnect, ClientID: cut(cl.ID), Username: cut(string(cl.Properties.Username)), Remote: cut(cl.Net.Remote)}
	if id, ok := h.acl.ids.get(cl); ok {
		e.Username, e.Role = id.Username, id.Role
	}
	h.clients.Store(cl, &e)
	h.emit(e)
}

func (h *eventsHook) OnDisconnect(cl *mqtt.Client, err error, _ bool) {
	v, ok := h.clients.LoadAndDelete(cl)
	if !ok {
		return // never logged in
	}
	e := *v.(*Event)
	e.Time, e.Kind, e.Err = time.Now(), EventDisconnect, cutErr(err)
	h.emit(e)
}

// OnACLCheck runs only when the ACL hook refused (see eventsHook), and
// refuses too. Refused deliveries are routine (a filter that also matches
// topics the client may not read) and refused subscriptions are told by
// OnSubscribed, so only publishes are reported here.
func (h *eventsHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if write {
		h.emit(h.denied(cl, acl.Publish.String(), topic, nil))
	}
	return false
}

// OnSubscribed reports the filters the broker refused.
func (h *eventsHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	if cl.Net.Inline {
		return
	}
	for i, f := range pk.Filters {
		if i < len(reasonCodes) && reasonCodes[i] >= packets.ErrUnspecifiedError.Code {
			h.emit(h.denied(cl, acl.Subscribe.String(), f.Filter, fmt.Errorf("reason code 0x%02x", reasonCodes[i])))
		}
	}
}

func (h *eventsHook) denied(cl *mqtt.Client, action, topic string, err error) Event {
	e := Event{Time: time.Now(), Kind: EventDenied, ClientID: cut(cl.ID), Username: cut(string(cl.Properties.Username)),
		Remote: cut(cl.Net.Remote), Action: action, Topic: cut(topic), Err: cutErr(err)}
	if id, ok := h.acl.ids.get(cl); ok {
		e.Role = id.Role
	}
	return e
}
