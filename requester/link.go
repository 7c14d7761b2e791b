package requester

import (
	"errors"
	"fmt"
	"time"
)

// ErrLinkLost is returned when the link to an external broker is down: to
// calls that were open when it dropped (their answers may be lost; the
// agent may or may not have run them) and to requests made before it is
// back. Retrying once the link is back is safe as far as the gateway goes.
var ErrLinkLost = errors.New("link to the MQTT broker lost")

// watchLink makes r follow the bus's link, if the bus is a LinkWatcher.
// The returned func stops that.
func (r *Requester) watchLink() (stop func()) {
	w, ok := r.bus.(LinkWatcher)
	if !ok {
		return func() {}
	}
	return w.OnLink(r.linkLost, r.linkUp)
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
// their subscriptions): forget it, and give the statuses the same grace as
// after Start to arrive again. Agents announce themselves online only once
// they are subscribed, so a request is not sent to a broker where no agent
// listens yet.
func (r *Requester) linkUp() {
	r.presence.forgetAll()
	r.mu.Lock()
	if r.started {
		r.startedAt = time.Now()
	}
	r.mu.Unlock()
}

// forgetAll drops every agent's status, as a change.
func (w *presenceWatch) forgetAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.agents) == 0 {
		return
	}
	clear(w.agents)
	clear(w.online)
	clear(w.heard)
	close(w.changed)
	w.changed = make(chan struct{})
	w.gen++
}
