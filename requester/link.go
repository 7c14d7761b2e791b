package requester

import (
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
)

// ErrLinkLost is returned when the link to an external broker is down: to
// calls that were open when it dropped (their answers may be lost; the
// agent may or may not have run them) and to requests made before it is
// back. Retrying once the link is back is safe as far as the gateway goes.
var ErrLinkLost = errors.New("link to the MQTT broker lost")

// watchLink makes r follow the bus's link, if the bus is a LinkWatcher.
// The returned func stops that.
func (r *Requester) watchLink() (stop func()) {
	stopLink, stopRefused := func() {}, func() {}
	if w, ok := r.bus.(LinkWatcher); ok {
		stopLink = w.OnLink(r.linkLost, r.linkUp)
	}
	if w, ok := r.bus.(RefusalWatcher); ok {
		stopRefused = w.OnRefused(r.refused)
	}
	return func() {
		stopLink()
		stopRefused()
	}
}

// refused handles a subscription the bus could not make again after a
// reconnect. A context that hears no replies fails its waiting calls at
// once, rather than at their deadlines, and leaves the cache, so that its
// next call subscribes again. Without the filter that holds every reply
// (PahoBusOptions.AllReplies) no call hears its answer: all fail. The bus
// keeps trying presence itself.
func (r *Requester) refused(filter string, err error) {
	cause := fmt.Errorf("%w (%v)", ErrLinkLost, err)
	var n int
	switch key, isReply := contract.ReplyFilterKey(filter); {
	case isReply:
		n = r.pending.failWhere(func(p *pendingCall) bool { return p.replyKey == key }, cause)
		r.cache.forget(filter)
	case filter == contract.PresenceFilter:
	default:
		n = r.pending.failAll(cause)
	}
	r.log.WithError(err).WithFields(logrus.Fields{"filter": filter, "calls": n}).Warn("a subscription was refused after a reconnect; failed the calls that waited on it")
}

// linkLost fails every open call: each waits for an answer that may be
// published while the gateway is not subscribed (clean session), and
// would otherwise hang until its deadline. The waiters remove their calls
// themselves.
func (r *Requester) linkLost(cause error) {
	err := ErrLinkLost
	if cause != nil {
		err = fmt.Errorf("%w (%v)", ErrLinkLost, cause)
	}
	if n := r.pending.failAll(err); n > 0 {
		r.log.WithError(cause).WithField("calls", n).Warn("link to the broker lost: open calls failed")
	}
}

// linkUp runs when the link is back, before the bus subscribes to
// presence again. What presence said before may be stale (a restarted
// broker without persistence lost the retained statuses, and the agents
// their subscriptions), but the retained statuses may not come again
// either: a NATS node whose JetStream is electing a leader after another
// node's loss sends none for seconds. So the instances that repeat their
// status stay as they were (a live one says so again within its interval,
// a gone one expires), and the others are forgotten until their retained
// status arrives, with the same grace as after Start. A request sent to an
// instance that has not subscribed again yet fails when it announces its
// new connection (failUnheard).
func (r *Requester) linkUp() {
	r.presence.forgetUnrepeated()
	r.mu.Lock()
	if r.started {
		r.startedAt = time.Now()
		r.presence.trustRetained(r.startedAt.Add(presenceGrace))
	}
	r.mu.Unlock()
}

// forgetUnrepeated drops the status of every instance that did not promise
// to repeat it (an interval), as a change.
func (w *presenceWatch) forgetUnrepeated() {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := map[string]bool{}
	for key, st := range w.agents {
		if w.heard[key].interval > 0 {
			continue
		}
		if st.Online {
			w.setOnline(st.Agent, -1)
		}
		w.forget(key)
		delete(w.suspect, key)
		changed[st.Agent] = true
	}
	if len(changed) == 0 {
		return
	}
	close(w.changed)
	w.changed = make(chan struct{})
	w.gen++
	for agent := range changed {
		if len(w.known[agent]) > 0 {
			w.agentGen[agent] = w.gen
		}
	}
}
