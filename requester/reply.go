package requester

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
)

// handleReply is the MessageHandler of every context's reply filter. It
// runs on the bus's delivery goroutine: it decodes, matches and hands off,
// never blocks, and never panics on what an agent sends.
func (r *Requester) handleReply(topic string, payload []byte) {
	// The payload is the bus's to give away: the message may share its bytes.
	var env contract.Envelope
	m := new(jsonrpc.Message)
	if err := contract.Decode(payload, &env, m); err != nil {
		// A well-formed envelope around a malformed message still counts
		// against its call (late, duplicate, wrong topic) and still claims
		// it; the message itself is dropped below.
		var envErr error
		if env, envErr = contract.DecodeEnvelope(payload); envErr != nil {
			r.dropped.Add(1)
			r.log.WithError(err).WithField("topic", topic).Debug("dropped reply")
			return
		}
		m = &jsonrpc.Message{} // no "jsonrpc": dropped after the lookup
	}
	p, kind := r.pending.lookup(env.CorrelationID)
	switch kind {
	case replyDuplicate:
		r.duplicates.Add(1)
		return
	case replyLate:
		r.late.Add(1)
		r.log.WithField("correlationId", env.CorrelationID).Debug("reply for no open call")
		return
	}
	agent, instance, key, ok := contract.SplitReply(topic)
	if !ok || agent != p.agent || key != p.replyKey {
		// Someone who learnt a correlation ID answers it from another
		// agent, or in another context: never let that complete the call.
		r.mismatched.Add(1)
		r.log.WithFields(logrus.Fields{"topic": topic, "correlationId": env.CorrelationID, "agent": p.agent}).
			Warn("reply from another agent or on another context's topic: dropped")
		return
	}
	if p.hear(instance) {
		r.claims.Add(1)
	}
	if m.JSONRPC != jsonrpc.Version {
		r.dropped.Add(1)
		r.log.WithField("correlationId", env.CorrelationID).Debug("dropped reply: not a JSON-RPC 2.0 message")
		return
	}
	if m.Method == "" {
		if (m.Result == nil && m.Error == nil) || !rawIDIs(m.ID, p.id) {
			r.dropped.Add(1)
			r.log.WithField("correlationId", env.CorrelationID).Debug("dropped reply: response without result, or with another id")
			return
		}
		if !p.finish(m, nil) {
			r.duplicates.Add(1)
		}
		return
	}
	if m.Method == contract.ClaimMethod {
		return // said all it had to say in its topic
	}
	if !p.addInterim(m) {
		r.interimDropped.Add(1)
	}
}

// rawIDIs reports whether the raw JSON-RPC id is the string id.
func rawIDIs(raw json.RawMessage, id string) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == len(id)+2 && raw[0] == '"' && raw[len(raw)-1] == '"' && string(raw[1:len(raw)-1]) == id {
		return true
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == id
}

// handlePresence is the MessageHandler of PresenceFilter.
func (r *Requester) handlePresence(topic string, payload []byte) {
	r.presenceHeard.Store(true)
	ch, ok := r.presence.handle(topic, payload, time.Now())
	if !ok {
		r.badPresence.Add(1)
		r.log.WithField("topic", topic).Debug("dropped presence message")
		return
	}
	switch {
	case ch.tooLarge:
		r.presenceTooLarge.Add(1)
		r.log.WithFields(logrus.Fields{"topic": topic, "bytes": len(payload)}).Debug("ignored a presence message over MaxPresenceBytes")
		return
	case ch.refused != "":
		r.instancesRefused.Add(1)
		if ch.refusedFirst {
			r.log.WithFields(logrus.Fields{"agent": ch.refused, "topic": topic, "max": r.opts.MaxInstancesPerAgent}).
				Warn("the agent has as many instances as MaxInstancesPerAgent, all online: new ones are not admitted until one goes (logged once)")
		}
		return
	}
	r.presenceChanged(ch)
}

// ReconnectGrace is how long after an agent instance announces a new
// connection its calls may still be claimed before those it said nothing
// of fail with ErrAgentReconnected: a request that reached it while it
// announced is claimed by the agent SDK after its ClaimAfter (250 ms by
// default), or answered.
const ReconnectGrace = 2 * time.Second

// presenceChanged fails the calls that a change leaves without their agent
// (ErrNoAgent) or their claiming instance (ErrAgentGone).
func (r *Requester) presenceChanged(ch presenceChange) {
	if r.opts.IgnorePresence {
		return
	}
	if ch.agentGone != "" {
		if n := r.pending.failAgent(ch.agentGone, ErrNoAgent); n > 0 {
			r.log.WithFields(logrus.Fields{"calls": n, "agent": ch.agentGone}).Warn("the agent's last instance went offline; failed its waiting calls")
		}
		return
	}
	if ch.instanceGone != "" {
		if n := r.pending.failClaimed(ch.instanceGone, ErrAgentGone); n > 0 {
			r.log.WithFields(logrus.Fields{"calls": n, "instance": ch.instanceGone}).Warn("an agent instance went offline; failed the calls it had claimed")
		}
	}
	if ch.instanceReconnected != "" {
		// The instance claims each call it still runs when it announces the
		// new connection (contract.Presence.Connection), and one that
		// reached it while it announced within ReconnectGrace: those it
		// says nothing of by then were lost while it was cut off. So were
		// the pool's requests no instance has claimed, if it is the only
		// instance: no other was subscribed to receive them.
		key, pool := ch.instanceReconnected, ch.reconnectedAlone
		if among := r.pending.unheard(key, pool); len(among) > 0 {
			time.AfterFunc(ReconnectGrace, func() {
				if n := r.pending.failUnheard(key, pool, among, ErrAgentReconnected); n > 0 {
					r.log.WithFields(logrus.Fields{"calls": n, "instance": key}).Warn("an agent instance reconnected without the calls sent to it meanwhile; failed them")
				}
			})
		}
	}
}
