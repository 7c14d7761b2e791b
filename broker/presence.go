package broker

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sirupsen/logrus"
)

// presenceHook clears the retained "online" status that a connection
// leaves behind when it closes without its Will or an "offline".
//
// An agent that disconnects cleanly sends no Will; one that connected
// without a Will sends none at all. Either way, if it did not publish
// "offline" first, its retained "online" stayed for good, and every
// gateway listed it (and sent it calls) as online: an agent could leave a
// phantom instance behind for every client ID it used. So once a
// connection has ended, the hook clears (an empty retained message, as
// an instance stopping for good does; docs/protocol.md) the status topic
// whose latest retained status is an "online" that connection published.
//
// A reconnecting agent is left alone. A connection replaced by a takeover
// clears nothing: its successor holds the client ID, sends claims for its
// calls and then its own "online".
//
// A clear never overwrites a newer connection's status, though it is
// published outside mu (so that the publish hooks it runs do not run
// under mu): the clear is decided under mu, only while the ended
// connection's "online" is the latest, and marks its topic as clearing
// before mu is let go. A retained status published on that topic
// meanwhile waits in OnPublish, before mochi retains it, until the clear
// is retained; so it comes after the clear and stands.
type presenceHook struct {
	mqtt.HookBase
	srv      *mqtt.Server
	ctx      context.Context // cancelled by Broker.Close: nothing is cleared then
	takeover *takeoverHook
	log      *logrus.Entry

	mu     sync.Mutex
	online map[string]*mqtt.Client // presence topic -> the connection whose retained "online" it holds
	// topics is online inverted: the topic of each connection's "online",
	// as it published it (the ACL checked it against the identity, whose
	// username need not be the CONNECT packet's).
	topics   map[*mqtt.Client]string
	clearing map[string]chan struct{} // presence topic -> closed once its clear is retained
}

func newPresenceHook(ctx context.Context, srv *mqtt.Server, takeover *takeoverHook, log *logrus.Entry) *presenceHook {
	return &presenceHook{srv: srv, ctx: ctx, takeover: takeover, log: log, online: make(map[string]*mqtt.Client),
		topics: make(map[*mqtt.Client]string), clearing: make(map[string]chan struct{})}
}

func (h *presenceHook) ID() string { return "toolbus-presence" }

func (h *presenceHook) Provides(b byte) bool {
	return b == mqtt.OnPublish || b == mqtt.OnWillSent || b == mqtt.OnDisconnect
}

// OnPublish notes which connection published the retained status of a
// presence topic. It is added after the ACL hook, so it sees only the
// publishes that are retained: the ACL allowed them (a client publishes
// only its own presence) and the ACL hook's OnPublish let them through.
func (h *presenceHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || !pk.FixedHeader.Retain || !isPresenceTopic(pk.TopicName) {
		return pk, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := h.clearing[pk.TopicName]; ch != nil; ch = h.clearing[pk.TopicName] {
		h.mu.Unlock()
		<-ch // the clear is retained: this status comes after it
		h.mu.Lock()
	}
	h.forgetLocked(h.online[pk.TopicName])
	if isOnline(pk.Payload) {
		h.forgetLocked(cl) // a client has one presence topic; should it publish on another, the latest counts
		h.online[pk.TopicName] = cl
		h.topics[cl] = pk.TopicName
	}
	return pk, nil
}

// forgetLocked forgets the "online" of cl, if any.
func (h *presenceHook) forgetLocked(cl *mqtt.Client) {
	if topic, ok := h.topics[cl]; ok {
		delete(h.topics, cl)
		delete(h.online, topic)
	}
}

// OnWillSent: a retained Will on the topic replaced the "online".
func (h *presenceHook) OnWillSent(cl *mqtt.Client, pk packets.Packet) {
	if !pk.FixedHeader.Retain || !isPresenceTopic(pk.TopicName) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.online[pk.TopicName] == cl {
		h.forgetLocked(cl)
	}
}

// OnDisconnect clears the "online" cl left retained, unless cl was taken
// over, its Will is still to come (a v5 Will delay), or the broker is
// closing.
func (h *presenceHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	if cl.Net.Inline {
		return
	}
	h.mu.Lock()
	topic, ok := h.topics[cl]
	if !ok || !h.clearsLocked(cl, topic) {
		h.mu.Unlock()
		return
	}
	done := make(chan struct{})
	h.clearing[topic] = done
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.clearing, topic)
		h.mu.Unlock()
		close(done)
	}()
	if err := h.srv.Publish(topic, nil, true, 0); err != nil {
		h.log.WithError(err).WithField("client", cut(cl.ID)).Warn("clear the presence of a closed connection")
		return
	}
	h.log.WithField("client", cut(cl.ID)).Info("cleared the retained online status of a connection closed without offline or Will")
}

// clearsLocked forgets the "online" of cl, which ended, on topic, and
// reports whether it is to be cleared.
func (h *presenceHook) clearsLocked(cl *mqtt.Client, topic string) bool {
	h.forgetLocked(cl)
	willDue := atomic.LoadUint32(&cl.Properties.Will.Flag) == 1 && cl.Properties.Will.TopicName == topic
	if h.ctx.Err() != nil || cl.IsTakenOver() || h.takeover.replaced(cl) || willDue {
		return false
	}
	cur, ok := h.srv.Clients.Get(cl.ID)
	return !ok || cur == cl // else the client ID lives on in another connection
}

// isOnline reports whether a presence payload says "online".
func isOnline(payload []byte) bool {
	var p struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(payload, &p) == nil && p.Status == "online"
}
